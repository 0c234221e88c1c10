"""PyTorch datasets over hipfile: samples read straight into tensors.

- ``RecordDataset(paths, record_bytes, ...)``: fixed-size records in shard
  files (map-style).
- ``FileDataset(source, ...)``: one sample per file (map-style).
- ``BatchDataset(dataset, batch_size, ...)``: an IterableDataset that yields
  whole batches, each read with one ``hipfile.read_batch`` into one tensor
  of shape ``(n, *sample_shape)``; use it with ``DataLoader(..., batch_size=None)``.

Map-style datasets also implement ``__getitems__``, so a DataLoader with
``batch_size=B`` reads each batch with one call too (the default collate then
stacks the per-sample views).

Where tensors live (``device=None``): on the current CUDA device when this
process can use CUDA; otherwise in CPU memory, pinned where CUDA is usable
for pinning. A DataLoader worker made by ``fork`` from a process that had
initialised CUDA cannot use CUDA (the driver refuses a forked child), so its
tensors are plain CPU tensors: pass ``pin_memory=True`` to the DataLoader to
pin them in the main process. For device reads inside the workers use
``multiprocessing_context="spawn"`` (or "forkserver"). Host reads work with
every start method.

Threads and memory: in a DataLoader worker process the dataset caps the
process's I/O threads at max(2, cores // num_workers) before its first read
(``hipfile.limit_io_threads``), unless ``io_threads`` was set explicitly
(``HIPFILE_IO_THREADS``, the config file, or ``hipfile.configure`` in
``worker_init_fn``, whose settings are then kept as given). Threads start as
work needs them, each with its own page-locked bounce memory, so eight
workers on a 16-core machine hold at most 2 each rather than 16.

Before a device read the dataset waits for the current stream (the caching
allocator may hand out memory that kernels queued earlier still use), then
reads; the tensor is complete when the call returns.
"""

from typing import List, Optional, Sequence, Union

import os

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

import hipfile
from hipfile.data import FileSamples, RecordShards, PathLike

__all__ = ["BatchDataset", "FileDataset", "RecordDataset", "default_device", "loader_io_threads"]


_sized_pid = 0


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def loader_io_threads(num_workers: int) -> int:
    """The I/O threads one of ``num_workers`` loader processes gets:
    max(2, cores // num_workers)."""
    return max(2, _cores() // max(1, num_workers))


def _size_for_worker() -> None:
    """In a DataLoader worker, once per process and before its first I/O:
    cap the engine's threads to this process's share of the cores."""
    global _sized_pid
    pid = os.getpid()
    if _sized_pid == pid:
        return
    _sized_pid = pid
    info = get_worker_info()
    if info is not None:
        hipfile.limit_io_threads(loader_io_threads(info.num_workers))


def _cuda_usable() -> bool:
    if not torch.cuda.is_available():
        return False
    in_bad_fork = getattr(torch.cuda, "_is_in_bad_fork", None)
    if in_bad_fork is not None and in_bad_fork():
        return False
    return hipfile.gpu_available()


def default_device() -> torch.device:
    """The current CUDA device where this process can use CUDA, else the CPU."""
    if _cuda_usable():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _dest(t: torch.Tensor):
    """What to hand ``hipfile.read_batch`` for tensor ``t``: a CPU tensor
    as a NumPy view of its bytes (the buffer protocol), a CUDA tensor as
    itself. PyTorch's DLPack export of a CPU tensor (``__dlpack_device__``)
    asks whether it is pinned, a CUDA call; in a DataLoader worker forked
    from a process whose CUDA driver was initialised (by hipfile or another
    library, without PyTorch knowing) that call fails with an initialization
    error, although reading into host memory needs no CUDA at all."""
    if t.device.type != "cpu":
        return t
    return t.reshape(-1).view(torch.uint8).numpy()


class _SampleDataset(Dataset):
    def __init__(self, samples, dtype, shape, device):
        self.samples = samples
        self.dtype = dtype
        self.shape = tuple(shape) if shape is not None else None
        self._device = torch.device(device) if device is not None else None
        self._itemsize = torch.empty((), dtype=dtype).element_size()

    @property
    def device(self) -> torch.device:
        """Where tensors are made (decided in the process that reads)."""
        _size_for_worker()
        return self._device if self._device is not None else default_device()

    def __len__(self) -> int:
        return len(self.samples)

    def _sample_shape(self, nbytes: int) -> tuple:
        if self.shape is not None:
            want = self._itemsize
            for d in self.shape:
                want *= d
            if want != nbytes:
                raise ValueError(f"a sample has {nbytes} bytes; shape {self.shape} of {self.dtype} needs {want}")
            return self.shape
        if nbytes % self._itemsize:
            raise ValueError(f"a sample of {nbytes} bytes is not a whole number of {self.dtype} items")
        return (nbytes // self._itemsize,)

    def _empty(self, shape) -> torch.Tensor:
        dev = self.device
        if dev.type == "cuda":
            t = torch.empty(shape, dtype=self.dtype, device=dev)
            torch.cuda.current_stream(dev).synchronize()
            return t
        return torch.empty(shape, dtype=self.dtype, pin_memory=_cuda_usable())

    def __getitem__(self, i: int) -> torch.Tensor:
        _size_for_worker()
        n = self.samples.nbytes(i)
        t = self._empty(self._sample_shape(n))
        self.samples.read([i], [_dest(t)])
        return t

    def __getitems__(self, indices: Sequence[int]) -> List[torch.Tensor]:
        """The samples at ``indices``, read with one batched call."""
        _size_for_worker()
        sizes = [self.samples.nbytes(i) for i in indices]
        if len(set(sizes)) == 1:
            batch = self.read_batch(indices)
            return list(batch.unbind(0))
        out = [self._empty(self._sample_shape(n)) for n in sizes]
        self.samples.read(list(indices), [_dest(t) for t in out])
        return out

    def read_batch(self, indices: Sequence[int]) -> torch.Tensor:
        """The samples at ``indices`` (all of one size) as one tensor of
        shape ``(len(indices), *sample_shape)``."""
        _size_for_worker()
        indices = list(indices)
        if not indices:
            raise ValueError("no indices")
        n = self.samples.nbytes(indices[0])
        shape = self._sample_shape(n)
        batch = self._empty((len(indices),) + tuple(shape))
        flat = batch.view(len(indices), -1)
        self.samples.read(indices, [_dest(row) for row in flat.unbind(0)])
        return batch

    def close(self) -> None:
        self.samples.close()


class RecordDataset(_SampleDataset):
    """Fixed-size records in shard files, as tensors of ``dtype`` shaped
    ``shape`` (default: 1-D). See ``hipfile.data.RecordShards``."""

    def __init__(
        self,
        paths: Sequence[PathLike],
        record_bytes: int,
        *,
        header_bytes: int = 0,
        dtype: torch.dtype = torch.uint8,
        shape: Optional[Sequence[int]] = None,
        device: Union[None, str, torch.device] = None,
        max_open: int = 64,
    ):
        super().__init__(RecordShards(paths, record_bytes, header_bytes, max_open), dtype, shape, device)


class FileDataset(_SampleDataset):
    """One sample per file (a directory's files, sorted, or a list of
    paths), as tensors of ``dtype`` shaped ``shape`` (default: 1-D, each
    file's length). See ``hipfile.data.FileSamples``."""

    def __init__(
        self,
        source: Union[PathLike, Sequence[PathLike]],
        *,
        suffix: str = "",
        dtype: torch.dtype = torch.uint8,
        shape: Optional[Sequence[int]] = None,
        device: Union[None, str, torch.device] = None,
        max_open: int = 256,
    ):
        super().__init__(FileSamples(source, suffix, max_open), dtype, shape, device)


class BatchDataset(IterableDataset):
    """Whole batches of a ``RecordDataset``/``FileDataset`` (samples of one
    size), each one tensor read with one call. Batches are dealt round-robin
    to DataLoader workers; ``shuffle`` permutes the samples with ``seed`` plus
    the epoch number (``set_epoch``), the same in every worker."""

    def __init__(
        self,
        dataset: _SampleDataset,
        batch_size: int,
        *,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
    ):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self) -> List[int]:
        n = len(self.dataset)
        if not self.shuffle:
            return list(range(n))
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return torch.randperm(n, generator=g).tolist()

    def __iter__(self):
        order = self._order()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for b in range(worker, len(self), workers):
            yield self.dataset.read_batch(order[b * self.batch_size : (b + 1) * self.batch_size])
