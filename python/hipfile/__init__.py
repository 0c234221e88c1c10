"""GPU-direct file I/O for Python, over the hipfile-rs engine (io_uring).

Read files into device arrays (PyTorch CUDA tensors, CuPy, JAX, anything with
``__cuda_array_interface__`` or DLPack) and host arrays (NumPy, PyTorch CPU
tensors, anything with the buffer protocol), and write from them::

    import hipfile, numpy as np
    with hipfile.open("data.bin") as f:
        a = np.empty(1 << 20, dtype=np.uint8)
        n = f.read(a)                          # blocking, GIL released
        fut = f.pread(a, file_offset=4096)     # a Future: fut.result(), await fut
    hipfile.read_batch([(f, 0, 4096, a), ...]) # a loader's whole batch at once

Names:

- ``open(path, mode="r")`` -> ``File`` (a context manager): ``read``,
  ``write``, ``pread``, ``pwrite`` (futures), ``read_async`` (ordered on a
  GPU stream), ``close``, ``size``, ``fileno``.
- ``Future``: ``result(timeout=None)``, ``done()``, ``add_done_callback``,
  awaitable from asyncio.
- ``read_batch(items)``: many ``(file, file_offset, size, dest[, dest_offset])``
  reads in flight together.
- ``read_file(path, buf, size=None, file_offset=0, buf_offset=0)``: open,
  read and close in one call without the GIL (a thread per sample file).
- ``configure(**settings)``: engine settings by keyword (the HIPFILE_*
  variables' names without the prefix, e.g. ``io_threads=4``), before the
  first I/O of the process. ``settings()``, ``shutdown()``,
  ``gpu_available()``, ``runtime()``.
- ``limit_io_threads(n)``: cap this process's I/O threads unless they were
  set explicitly (what ``hipfile.torch`` does in a DataLoader worker);
  ``usage()``: the threads and bounce memory the engine holds now.
- ``HipFileError`` (an OSError): ``code`` (hipFile error, e.g. 5022),
  ``errno``, ``gpu_error``, ``strerror``. Bad arguments raise ValueError or
  TypeError; a read that starts past the end of its file raises EOFError.
- ``hipfile.torch``: Datasets for PyTorch (import it explicitly).

Threads and memory: the engine starts I/O threads as work needs them, up
to ``io_threads`` (default min(cores, 16)); each holds its own page-locked
bounce memory (about 20 MiB). A process that reads one sample at a time
holds one; a DataLoader worker process reading through ``hipfile.torch`` is
capped at max(2, cores // num_workers) unless ``io_threads`` is set.

Processes: a child after ``fork()`` gets a fresh library (host memory always;
device memory only if the GPU runtime allows it there, which CUDA does not
when the parent had initialised it). For device reads in DataLoader workers
use the "spawn" or "forkserver" start method. Files opened before a fork are
reopened on the child's engine at their first use there.

The engine takes the same HIPFILE_* environment variables as the C library.
Without a GPU, everything works with host memory.
"""

from ._hipfile import (
    VERSION,
    File,
    Future,
    HipFileError,
    StreamRead,
    configure,
    fork_generation,
    gpu_available,
    limit_io_threads,
    open,
    read_batch,
    read_file,
    runtime,
    settings,
    shutdown,
    usage,
)

__version__ = ".".join(str(v) for v in VERSION)

__all__ = [
    "File",
    "Future",
    "HipFileError",
    "StreamRead",
    "VERSION",
    "configure",
    "fork_generation",
    "gpu_available",
    "limit_io_threads",
    "open",
    "read_batch",
    "read_file",
    "runtime",
    "settings",
    "shutdown",
    "usage",
]
