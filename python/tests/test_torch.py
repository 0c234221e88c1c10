"""hipfile.torch with CPU tensors and DataLoader worker processes. Needs
PyTorch; skipped (and reported as skipped) where it is not installed."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import hipfile  # noqa: E402
from conftest import pattern  # noqa: E402
from hipfile.torch import BatchDataset, FileDataset, RecordDataset  # noqa: E402


def make_files(tdir, n=32, size=16384):
    data = [pattern(size, i) for i in range(n)]
    for i, d in enumerate(data):
        d.tofile(os.path.join(tdir, f"s{i:03d}.bin"))
    return data


def test_file_dataset_items_match_the_files(tdir):
    data = make_files(tdir, 4)
    ds = FileDataset(tdir, device="cpu")
    assert len(ds) == 4
    assert np.array_equal(ds[2].numpy(), data[2])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_with_two_workers_over_a_directory(tdir, method):
    data = make_files(tdir)
    ds = FileDataset(tdir, device="cpu", dtype=torch.uint8)
    ds[0]  # the parent reads before the workers start
    dl = DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context=method)
    seen = 0
    for b, batch in enumerate(dl):
        for k in range(batch.shape[0]):
            assert np.array_equal(batch[k].numpy(), data[b * 8 + k])
            seen += 1
    assert seen == len(data)


def test_batch_dataset_with_two_workers_yields_every_record_once(tdir):
    rec = 4096
    d = pattern(rec * 50, 9)
    p = os.path.join(tdir, "shard")
    d.tofile(p)
    ds = RecordDataset([p], rec, device="cpu", shape=(rec // 4,), dtype=torch.int32)
    it = BatchDataset(ds, batch_size=8, shuffle=True, seed=3)
    dl = DataLoader(it, batch_size=None, num_workers=2, multiprocessing_context="fork")
    rows = [r.numpy().view(np.uint8).tobytes() for batch in dl for r in batch]
    want = sorted(d[i * rec : (i + 1) * rec].tobytes() for i in range(50))
    assert sorted(rows) == want


class _ThreadsProbe(FileDataset):
    """Each sample with the I/O threads its process may use and runs."""

    def __getitem__(self, i):
        t = super().__getitem__(i)
        return t, hipfile.settings()["io_threads"], hipfile.usage()["workers"], os.getpid()


def _per_process_threads(tdir):
    make_files(tdir, 16)
    ds = _ThreadsProbe(tdir, device="cpu")
    dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    return {int(pid): (int(limit), int(running)) for _, limit, running, pid in dl}


def test_dataloader_workers_cap_their_io_threads(tdir):
    from hipfile.torch import loader_io_threads

    cores = len(os.sched_getaffinity(0))
    want = min(loader_io_threads(2), cores, 16)
    seen = _per_process_threads(tdir)
    assert len(seen) == 2, seen
    for pid, (limit, running) in seen.items():
        assert limit == want, (pid, limit, want)
        assert 1 <= running <= limit


def test_dataloader_workers_keep_an_explicit_thread_count(tdir, monkeypatch):
    monkeypatch.setenv("HIPFILE_IO_THREADS", "3")
    seen = _per_process_threads(tdir)
    assert len(seen) == 2, seen
    assert all(limit == 3 for limit, _ in seen.values()), seen
