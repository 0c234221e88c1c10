"""Sample layouts for data loaders, without PyTorch: where each sample of a
data set lies, and reading a batch of them at once.

- ``RecordShards(paths, record_bytes, header_bytes=0)``: fixed-size records
  stored back to back in shard files (an optional header before each shard's
  first record); sample ``i`` is the i-th record across the shards in order.
- ``FileSamples(source)``: one sample per file (a directory's files, sorted,
  or a list of paths).

Both give ``len()``, ``nbytes(i)``, ``span(i) -> (File, offset, size)`` and
``read(indices, dests)``, which reads the samples into the destinations with
one ``hipfile.read_batch``. Files are opened on first use and kept in a small
cache (``max_open``); objects made before a fork keep working in the child
(each file reopens on the child's engine at its first use there).
``hipfile.torch`` builds PyTorch datasets on these.
"""

import bisect
import os
from collections import OrderedDict
from typing import List, Sequence, Tuple, Union

import hipfile

PathLike = Union[str, "os.PathLike[str]"]


class _OpenFiles:
    """Up to ``max_open`` open files, least recently used closed first."""

    def __init__(self, max_open: int):
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.max_open = max_open
        self._open: "OrderedDict[str, hipfile.File]" = OrderedDict()

    def get(self, path: str, pinned: Sequence[str] = ()) -> hipfile.File:
        f = self._open.get(path)
        if f is not None:
            self._open.move_to_end(path)
            return f
        f = hipfile.open(path, "r")
        self._open[path] = f
        while len(self._open) > self.max_open:
            old, of = next(iter(self._open.items()))
            if old in pinned:
                break
            self._open.popitem(last=False)
            of.close()
        return f

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()

    def __getstate__(self):
        # Pickled into spawned workers: they open their own files.
        return {"max_open": self.max_open}

    def __setstate__(self, state):
        self.__init__(state["max_open"])


class _Samples:
    _files: _OpenFiles

    def __len__(self) -> int:
        raise NotImplementedError

    def nbytes(self, i: int) -> int:
        raise NotImplementedError

    def _place(self, i: int) -> Tuple[str, int, int]:
        raise NotImplementedError

    def _index(self, i: int) -> int:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample {i} out of range (0..{n - 1})")
        return i

    def span(self, i: int) -> Tuple[hipfile.File, int, int]:
        """The open file, byte offset and size of sample ``i``."""
        path, offset, size = self._place(self._index(i))
        return self._files.get(path), offset, size

    def read(self, indices: Sequence[int], dests: Sequence[object]) -> List[int]:
        """Read sample ``indices[k]`` into ``dests[k]`` (each at least that
        sample's size) for every k, all in flight together; the byte counts.
        Raises EOFError when a file is shorter than its samples say."""
        if len(indices) != len(dests):
            raise ValueError(f"{len(indices)} indices but {len(dests)} destinations")
        places = [self._place(self._index(i)) for i in indices]
        wanted = {p for p, _, _ in places}
        items = []
        for (path, offset, size), dest in zip(places, dests):
            items.append((self._files.get(path, wanted), offset, size, dest))
        counts = hipfile.read_batch(items)
        for k, ((path, offset, size), n) in enumerate(zip(places, counts)):
            if n != size:
                raise EOFError(
                    f"sample {indices[k]}: {path} has {n} of its {size} bytes at offset {offset}"
                )
        return counts

    def close(self) -> None:
        """Close the cached files (they reopen on the next read)."""
        self._files.close()


class RecordShards(_Samples):
    """Fixed-size records in shard files: sample ``i`` is the i-th record,
    counting through the shards in the order given. A shard holds
    ``(size - header_bytes) // record_bytes`` records; bytes after the last
    whole record are ignored."""

    def __init__(
        self,
        paths: Sequence[PathLike],
        record_bytes: int,
        header_bytes: int = 0,
        max_open: int = 64,
    ):
        if record_bytes <= 0:
            raise ValueError("record_bytes must be positive")
        if header_bytes < 0:
            raise ValueError("header_bytes must not be negative")
        self.paths = [os.fspath(p) for p in paths]
        if not self.paths:
            raise ValueError("no shard files")
        self.record_bytes = record_bytes
        self.header_bytes = header_bytes
        self._starts = []
        total = 0
        for p in self.paths:
            self._starts.append(total)
            size = os.stat(p).st_size
            total += max(0, size - header_bytes) // record_bytes
        self._total = total
        self._files = _OpenFiles(max_open)

    def __len__(self) -> int:
        return self._total

    def nbytes(self, i: int) -> int:
        self._index(i)
        return self.record_bytes

    def _place(self, i: int) -> Tuple[str, int, int]:
        s = bisect.bisect_right(self._starts, i) - 1
        offset = self.header_bytes + (i - self._starts[s]) * self.record_bytes
        return self.paths[s], offset, self.record_bytes


class FileSamples(_Samples):
    """One sample per file: the regular files of a directory (sorted by
    name, optionally only names ending in ``suffix``) or a list of paths."""

    def __init__(
        self,
        source: Union[PathLike, Sequence[PathLike]],
        suffix: str = "",
        max_open: int = 256,
    ):
        if isinstance(source, (str, bytes, os.PathLike)):
            root = os.fspath(source)
            names = sorted(
                n for n in os.listdir(root) if n.endswith(suffix) and os.path.isfile(os.path.join(root, n))
            )
            self.paths = [os.path.join(root, n) for n in names]
        else:
            self.paths = [os.fspath(p) for p in source]
        if not self.paths:
            raise ValueError("no sample files")
        self.sizes = [os.stat(p).st_size for p in self.paths]
        self._files = _OpenFiles(max_open)

    def __len__(self) -> int:
        return len(self.paths)

    def nbytes(self, i: int) -> int:
        return self.sizes[self._index(i)]

    def _place(self, i: int) -> Tuple[str, int, int]:
        return self.paths[i], 0, self.sizes[i]
