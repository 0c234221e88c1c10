"""Type stubs of the native module (the public names are re-exported by hipfile)."""

from os import PathLike
from typing import Any, Callable, Generator, Iterable, Optional, Tuple, Union

VERSION: Tuple[int, int, int]

class HipFileError(OSError):
    """A hipFile operation failed."""

    code: Optional[int]
    """The hipFileOpError_t value (e.g. 5022 invalid value), None for a system error."""
    errno: Optional[int]
    gpu_error: Optional[int]
    """The GPU runtime's error code for hipFile error 5011."""
    strerror: str

Buffer = Any
"""An object exposing __cuda_array_interface__, the buffer protocol or DLPack."""

Stream = Any
"""A torch.cuda.Stream, a CuPy stream, or an int stream handle."""

class Future:
    """The result of File.pread / File.pwrite."""

    def result(self, timeout: Optional[float] = None) -> int:
        """Wait (without the GIL); the byte count, or raise the transfer's error."""
    def done(self) -> bool:
        """True once the transfer has finished."""
    def add_done_callback(self, callback: Callable[["Future"], Any]) -> None:
        """Call callback(future) once the transfer has finished."""
    def __await__(self) -> Generator[Any, None, int]: ...

class StreamRead:
    """A read enqueued on a GPU stream by File.read_async."""

    @property
    def bytes_read(self) -> int:
        """Bytes read, valid once the stream has passed the read."""
    def synchronize(self) -> int:
        """Wait for the stream; the bytes read, or raise the read's error."""

class File:
    """An open file (from hipfile.open); a context manager."""

    @property
    def closed(self) -> bool: ...
    @property
    def name(self) -> str: ...
    @property
    def mode(self) -> str: ...
    def read(
        self, buf: Buffer, size: Optional[int] = None, file_offset: int = 0, buf_offset: int = 0
    ) -> int:
        """Read into buf; the bytes read (EOFError when starting past the end)."""
    def write(
        self, buf: Buffer, size: Optional[int] = None, file_offset: int = 0, buf_offset: int = 0
    ) -> int:
        """Write from buf, durably; the bytes written."""
    def pread(
        self, buf: Buffer, size: Optional[int] = None, file_offset: int = 0, buf_offset: int = 0
    ) -> Future:
        """Start a read; a Future of the byte count."""
    def pwrite(
        self, buf: Buffer, size: Optional[int] = None, file_offset: int = 0, buf_offset: int = 0
    ) -> Future:
        """Start a write; a Future of the byte count."""
    def read_async(
        self,
        buf: Buffer,
        stream: Stream,
        size: Optional[int] = None,
        file_offset: int = 0,
        buf_offset: int = 0,
    ) -> StreamRead:
        """Enqueue a read on a GPU stream."""
    def close(self) -> None: ...
    def fileno(self) -> int: ...
    def size(self) -> int: ...
    def __enter__(self) -> "File": ...
    def __exit__(self, *exc: Any) -> bool: ...

def open(path: Union[str, bytes, "PathLike[str]", int], mode: str = "r") -> File:
    """Open a path or a descriptor (duplicated) for GPU-direct I/O."""

def read_file(
    path: Union[str, bytes, "PathLike[str]"],
    buf: Buffer,
    size: Optional[int] = None,
    file_offset: int = 0,
    buf_offset: int = 0,
) -> int:
    """Open path, read into buf and close it, in one call without the GIL; the bytes read."""

def read_batch(items: Iterable[tuple]) -> list:
    """Read (file, file_offset, size, dest[, dest_offset]) items at once, in no
    set order (overlapping destinations get either item's bytes); the byte counts."""

def configure(**settings: Union[int, str, bool]) -> dict:
    """Engine settings by keyword, before the first I/O of the process."""

def settings() -> dict:
    """The running engine's settings."""

def limit_io_threads(n: int) -> Optional[int]:
    """Cap this process's I/O threads at n unless set explicitly, before the
    first I/O; the io_threads the engine will use, or None if left alone."""

def usage() -> dict:
    """What this process's engine holds now: workers, bounce_bytes,
    locked_bounce_bytes (0 before it started; does not start it)."""

def shutdown() -> None:
    """Release this process's engine."""

def gpu_available() -> bool:
    """True when device memory can be used in this process."""

def runtime() -> str:
    """"cuda", "hip" or "none"."""

def fork_generation() -> int:
    """How many fork()s separate this process from the first that used hipfile."""
