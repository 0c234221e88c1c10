#!/usr/bin/env python3
"""Loader shapes into GPU memory, in one run: hipfile from Python, KvikIO,
and hipfile driven from C, hot and cold. The C side is the program
python/bench/loader_shapes_c.c (--c-prog: built with nvcc on the GPU
machine, it times each pass itself), or else the same C calls made through
ctypes over libhipfile.so (--c-lib), whose per-call cost in the interpreter
is then part of the C figure.

Shapes:
  small   8192 files x 256 KiB, read in batches of --batch files
  mid     512 files x 4 MiB, in batches of --batch files
  mid8t   the same 512 files from 8 threads, one whole file per call
  seq16   one 4.29 GB (4 GiB) file, sequential 16 MiB requests
  seq256  the same file, sequential 256 MiB requests

Per batch of files, each side opens every file, reads all of them into one
device buffer with every read in flight (hipfile: hipfile.read_batch; C:
hipFileHandleRegister + hipFileBatchIOSubmit/GetStatus; KvikIO: CuFile +
pread futures), then closes them: what a loader does per batch. Threaded
shapes give each of N threads its share of the files, opened, read whole
with one blocking call and closed one at a time (hipfile File.read, KvikIO
pread(...).get(); no C side): a loader whose worker threads each read their
own samples. Sequential
shapes issue one blocking request at a time (hipfile File.read, C
hipFileRead, KvikIO pread(...).get()).

KvikIO runs with 16 threads and 4 MiB tasks (KVIKIO_NTHREADS,
KVIKIO_TASK_SIZE, set before it is imported). Cold: the page cache is dropped
(sync; echo 3 > /proc/sys/vm/drop_caches, root) before every measurement;
without --drop-caches only hot rows are measured. Hot: before every side the
files are read once with plain buffered reads, then once by the side itself
(untimed, to start its threads), and before every timed run any file the page
cache lost is read again. The sides take turns run by run, so that the
machine's drift moves them alike. The side's own pass cannot be the warm-up:
hipfile reads ranges the page cache lacks with O_DIRECT, which leaves them uncached,
so after a cold run (or on a machine whose cache dropped the files) a hipfile
"hot" row would read from the disk. Each cell is the median of --repeat runs.
The "cached" column is the fraction of the files' pages in the page cache
(mincore) when a timed run of the row started: the smallest of the row's hot
runs (1.000 when every side read a hot cache), the largest of its cold runs
(near 0 when the drop worked).

--mem host reads into NumPy arrays instead of device memory (the same shapes
on a machine without a GPU; --no-kvikio where KvikIO is not installed).

Writes a table (GB/s, hipfile/KvikIO and Python/C ratios) to stdout and, with
$OUT set, loader_shapes.md and loader_shapes.json under $OUT.

  python3 python/bench/loader_shapes.py --dir /tmp/shapes --drop-caches \
      --c-lib .carry/libhipfile.so
"""

import argparse
import ctypes
import json
import mmap
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("KVIKIO_NTHREADS", "16")
os.environ.setdefault("KVIKIO_TASK_SIZE", str(4 << 20))

import numpy as np  # noqa: E402

import hipfile  # noqa: E402

MiB = 1 << 20
SHAPES = {
    "small": dict(files=8192, size=256 << 10),
    "mid": dict(files=512, size=4 * MiB),
    "mid8t": dict(files=512, size=4 * MiB, threads=8),
    "seq16": dict(files=1, size=4 << 30, request=16 * MiB),
    "seq256": dict(files=1, size=4 << 30, request=256 * MiB),
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def make_files(root, shape):
    spec = SHAPES[shape]
    sub = os.path.join(root, f"{spec['files']}x{spec['size']}")
    os.makedirs(sub, exist_ok=True)
    block = (np.arange(min(spec["size"], 64 * MiB), dtype=np.uint32) * 2654435761 >> 7).astype(np.uint8)
    paths = []
    for i in range(spec["files"]):
        p = os.path.join(sub, f"f{i:05d}.bin")
        if not (os.path.exists(p) and os.path.getsize(p) == spec["size"]):
            with open(p, "wb") as f:
                left = spec["size"]
                while left:
                    n = min(left, len(block))
                    f.write(block[:n].tobytes())
                    left -= n
        paths.append(p)
    return paths


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def cached_pages(path):
    """(pages of `path` in the page cache, pages of the file), from mincore
    over a read-only mapping (which faults nothing in)."""
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    if size == 0:
        return 0, 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
        vec = np.zeros(pages, dtype=np.uint8)
        view = np.frombuffer(m, dtype=np.uint8)
        try:
            rc = _libc.mincore(view.ctypes.data, size, vec.ctypes.data)
        finally:
            del view  # the mapping cannot close while a view exports it
        if rc != 0:
            raise OSError(ctypes.get_errno(), f"mincore {path}")
    return int(np.count_nonzero(vec & 1)), pages


def cached_fraction(paths):
    """The fraction of the files' pages that are in the page cache."""
    have = total = 0
    for p in paths:
        h, t = cached_pages(p)
        have += h
        total += t
    return have / total if total else 1.0


def warm_page_cache(paths, block=64 * MiB):
    """Read every file not wholly in the page cache with buffered reads (what
    fills the cache, whoever reads next)."""
    buf = bytearray(block)
    for p in paths:
        have, total = cached_pages(p)
        if have == total:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            while os.readv(fd, [buf]) > 0:
                pass
        finally:
            os.close(fd)


class DeviceBuffer:
    """One device allocation (PyTorch, else CuPy) with a raw pointer."""

    def __init__(self, nbytes):
        try:
            import torch

            self.array = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            self.ptr = self.array.data_ptr()
            self.sync = torch.cuda.synchronize
        except ImportError:
            import cupy

            self.array = cupy.empty(nbytes, dtype=cupy.uint8)
            self.ptr = self.array.data.ptr
            self.sync = cupy.cuda.runtime.deviceSynchronize
        self.nbytes = nbytes

    def view(self, off, n):
        return self.array[off : off + n]


class HostBuffer(DeviceBuffer):
    """A NumPy array in host memory (--mem host: the same shapes without a GPU)."""

    def __init__(self, nbytes):
        self.array = np.zeros(nbytes, dtype=np.uint8)
        self.ptr = self.array.ctypes.data
        self.sync = lambda: None
        self.nbytes = nbytes


# -- hipfile from Python ------------------------------------------------------


def py_files(paths, size, batch, dev):
    for b in range(0, len(paths), batch):
        group = paths[b : b + batch]
        files = [hipfile.open(p) for p in group]
        items = [(f, 0, size, dev.array, k * size) for k, f in enumerate(files)]
        counts = hipfile.read_batch(items)
        assert counts == [size] * len(group)
        for f in files:
            f.close()


def in_threads(threads, work):
    """Run work(t) for t in range(threads) on threads of their own; raise
    the first failure."""
    with ThreadPoolExecutor(threads) as ex:
        for r in [ex.submit(work, t) for t in range(threads)]:
            r.result()


def py_threads(paths, size, threads, dev):
    def work(t):
        for p in paths[t::threads]:
            with hipfile.open(p) as f:
                assert f.read(dev.array, size=size, buf_offset=t * size) == size

    in_threads(threads, work)


def py_seq(path, size, request, dev):
    with hipfile.open(path) as f:
        for off in range(0, size, request):
            n = f.read(dev.array, size=min(request, size - off), file_offset=off)
            assert n == min(request, size - off)


# -- KvikIO ------------------------------------------------------------------


def kvikio_module():
    import kvikio

    try:
        kvikio.defaults.set({"num_threads": 16, "task_size": 4 * MiB})
    except Exception:
        pass
    return kvikio


def kv_files(kvikio, paths, size, batch, dev):
    for b in range(0, len(paths), batch):
        group = paths[b : b + batch]
        files = [kvikio.CuFile(p, "r") for p in group]
        futs = [f.pread(dev.view(k * size, size), size, 0) for k, f in enumerate(files)]
        for fu in futs:
            assert fu.get() == size
        for f in files:
            f.close()


def kv_threads(kvikio, paths, size, threads, dev):
    def work(t):
        view = dev.view(t * size, size)
        for p in paths[t::threads]:
            f = kvikio.CuFile(p, "r")
            assert f.pread(view, size, 0).get() == size
            f.close()

    in_threads(threads, work)


def kv_seq(kvikio, path, size, request, dev):
    f = kvikio.CuFile(path, "r")
    for off in range(0, size, request):
        n = min(request, size - off)
        assert f.pread(dev.view(0, n), n, off).get() == n
    f.close()


# -- hipfile from C (ctypes) -------------------------------------------------


class Descr(ctypes.Structure):
    # hipFileDescr_t: type @0, the handle union @8, fs_ops @16 (24 bytes).
    _fields_ = [
        ("type", ctypes.c_int),
        ("_pad0", ctypes.c_int),
        ("fd", ctypes.c_int),
        ("_pad1", ctypes.c_int),
        ("fs_ops", ctypes.c_void_p),
    ]


class Err(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("hip_drv_err", ctypes.c_int)]


class IoParams(ctypes.Structure):
    _fields_ = [
        ("mode", ctypes.c_int),
        ("dev_ptr_base", ctypes.c_void_p),
        ("file_offset", ctypes.c_int64),
        ("dev_ptr_offset", ctypes.c_int64),
        ("size", ctypes.c_size_t),
        ("fh", ctypes.c_void_p),
        ("opcode", ctypes.c_int),
        ("cookie", ctypes.c_void_p),
    ]


class IoEvents(ctypes.Structure):
    _fields_ = [("cookie", ctypes.c_void_p), ("status", ctypes.c_uint), ("ret", ctypes.c_size_t)]


class CLib:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.hipFileDriverOpen.restype = Err
        lib.hipFileHandleRegister.restype = Err
        lib.hipFileHandleRegister.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Descr)]
        lib.hipFileHandleDeregister.argtypes = [ctypes.c_void_p]
        lib.hipFileRead.restype = ctypes.c_ssize_t
        lib.hipFileRead.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64]
        lib.hipFileBatchIOSetUp.restype = Err
        lib.hipFileBatchIOSetUp.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
        lib.hipFileBatchIOSubmit.restype = Err
        lib.hipFileBatchIOSubmit.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(IoParams), ctypes.c_uint]
        lib.hipFileBatchIOGetStatus.restype = Err
        lib.hipFileBatchIOGetStatus.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(IoEvents),
            ctypes.c_void_p,
        ]
        lib.hipFileBatchIODestroy.argtypes = [ctypes.c_void_p]
        assert lib.hipFileDriverOpen().err == 0
        self.lib = lib

    def register(self, fd):
        d = Descr(type=1, fd=fd)
        h = ctypes.c_void_p()
        e = self.lib.hipFileHandleRegister(ctypes.byref(h), ctypes.byref(d))
        assert e.err == 0, e.err
        return h

    def files(self, paths, size, batch, dev):
        lib = self.lib
        bh = ctypes.c_void_p()
        assert lib.hipFileBatchIOSetUp(ctypes.byref(bh), batch).err == 0
        params = (IoParams * batch)()
        events = (IoEvents * batch)()
        for b in range(0, len(paths), batch):
            group = paths[b : b + batch]
            fds = [os.open(p, os.O_RDONLY) for p in group]
            hs = [self.register(fd) for fd in fds]
            for k, h in enumerate(hs):
                params[k] = IoParams(1, dev.ptr, 0, k * size, size, h, 0, None)
            assert lib.hipFileBatchIOSubmit(bh, len(group), params, 0).err == 0
            done = 0
            while done < len(group):
                nr = ctypes.c_uint(len(group) - done)
                e = lib.hipFileBatchIOGetStatus(bh, nr.value, ctypes.byref(nr), events, None)
                assert e.err == 0
                for k in range(nr.value):
                    assert events[k].ret == size, events[k].ret
                done += nr.value
            for h, fd in zip(hs, fds):
                lib.hipFileHandleDeregister(h)
                os.close(fd)
        lib.hipFileBatchIODestroy(bh)

    def seq(self, path, size, request, dev):
        fd = os.open(path, os.O_RDONLY)
        h = self.register(fd)
        for off in range(0, size, request):
            n = min(request, size - off)
            assert self.lib.hipFileRead(h, dev.ptr, n, off, 0) == n
        self.lib.hipFileHandleDeregister(h)
        os.close(fd)


class CProg:
    """The C side as a separate program (loader_shapes_c.c) that runs one
    pass per command and answers with the pass's own wall time."""

    def __init__(self, path):
        self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def _run(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split(maxsplit=1)
        if not reply or reply[0] != "ok":
            raise RuntimeError(f"loader_shapes_c: {cmd}: {' '.join(reply) or 'no answer'}")
        return float(reply[1])

    def files(self, paths, size, batch, dev):
        return self._run(f"files {os.path.dirname(paths[0])} {size} {len(paths)} {batch}")

    def seq(self, path, size, request, dev):
        return self._run(f"seq {path} {size} {request}")


# -----------------------------------------------------------------------------


def measure(sides, nbytes, cold, repeat, dev, paths):
    """Per side: the median GB/s of `repeat` timed runs, every run's GB/s,
    and the fraction of the files' pages that were cached as each timed run
    started. The sides take turns run by run (A B C, A B C, ...), so that a
    machine whose speed drifts over a minute, as these shared ones do by up
    to 50 %, moves every side alike instead of favouring whichever ran
    first. A side that times itself returns its pass's seconds from its
    function."""
    rates = {side: [] for side in sides}
    cached = {side: [] for side in sides}
    if not cold:
        for fn in sides.values():
            warm_page_cache(paths)
            fn()  # the side's own threads and buffers, untimed
    for _ in range(repeat):
        for side, fn in sides.items():
            if cold:
                drop_caches()
            else:
                warm_page_cache(paths)
            cached[side].append(cached_fraction(paths))
            dev.sync()
            t0 = time.perf_counter()
            own = fn()
            dev.sync()
            secs = own if isinstance(own, float) else time.perf_counter() - t0
            rates[side].append(nbytes / secs / 1e9)
    return {side: (statistics.median(rates[side]), rates[side], cached[side]) for side in sides}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("HIPFILE_BENCH_DIR", "/tmp/hipfile-shapes"))
    ap.add_argument("--shapes", default="small,mid,mid8t,seq16,seq256")
    ap.add_argument("--batch", type=int, default=64, help="files per batch for small and mid")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--drop-caches", action="store_true", help="also measure cold (root)")
    ap.add_argument("--c-lib", default=None, help="libhipfile.so for the C side through ctypes (default: .carry/ or target/release/)")
    ap.add_argument("--c-prog", default=None, help="the C side as a program: loader_shapes_c built with nvcc")
    ap.add_argument(
        "--c-prog-also",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another build's loader_shapes_c, run as side c-NAME in the same turns (a before/after comparison)",
    )
    ap.add_argument("--no-kvikio", action="store_true")
    ap.add_argument("--no-c", action="store_true")
    ap.add_argument("--mem", choices=["device", "host"], default="device", help="where the reads land")
    args = ap.parse_args()

    kvikio = None if args.no_kvikio else kvikio_module()
    clib = None
    if args.c_prog and not args.no_c:
        if args.mem != "device":
            sys.exit("--c-prog reads into device memory only: use --c-lib with --mem host")
        clib = CProg(os.path.abspath(args.c_prog))
    elif not args.no_c:
        path = args.c_lib
        if path is None:
            for cand in (".carry/libhipfile.so", "target/release/libhipfile.so"):
                if os.path.exists(cand):
                    path = cand
                    break
        if path is None:
            sys.exit("no libhipfile.so for the C side: pass --c-lib or --no-c")
        clib = CLib(os.path.abspath(path))

    also = {}
    for spec in args.c_prog_also:
        name, _, path = spec.partition("=")
        if not name or not path:
            sys.exit(f"--c-prog-also wants NAME=PATH, not {spec!r}")
        if args.mem != "device":
            sys.exit("--c-prog-also reads into device memory only")
        also["c-" + name] = CProg(os.path.abspath(path))

    Buffer = HostBuffer if args.mem == "host" else DeviceBuffer
    modes = ["hot"] + (["cold"] if args.drop_caches else [])
    rows = []
    for shape in args.shapes.split(","):
        spec = SHAPES[shape]
        log(f"preparing {shape}")
        paths = make_files(args.dir, shape)
        size = spec["size"]
        nbytes = size * len(paths)
        if "threads" in spec:
            threads = spec["threads"]
            dev = Buffer(threads * size)
            sides = {
                "python": lambda: py_threads(paths, size, threads, dev),
                "kvikio": kvikio and (lambda: kv_threads(kvikio, paths, size, threads, dev)),
            }
        elif "request" in spec:
            req = spec["request"]
            dev = Buffer(req)
            sides = {
                "python": lambda: py_seq(paths[0], size, req, dev),
                "kvikio": kvikio and (lambda: kv_seq(kvikio, paths[0], size, req, dev)),
                "c": clib and (lambda: clib.seq(paths[0], size, req, dev)),
            }
            for name, prog in also.items():
                sides[name] = lambda prog=prog: prog.seq(paths[0], size, req, dev)
        else:
            batch = min(args.batch, len(paths))
            dev = Buffer(batch * size)
            sides = {
                "python": lambda: py_files(paths, size, batch, dev),
                "kvikio": kvikio and (lambda: kv_files(kvikio, paths, size, batch, dev)),
                "c": clib and (lambda: clib.files(paths, size, batch, dev)),
            }
            for name, prog in also.items():
                sides[name] = lambda prog=prog: prog.files(paths, size, batch, dev)
        for mode in modes:
            row = {"shape": shape, "mode": mode}
            live = {side: fn for side, fn in sides.items() if fn}
            for side, (med, all_, cached) in measure(live, nbytes, mode == "cold", args.repeat, dev, paths).items():
                row[side] = med
                row[side + "_runs"] = all_
                row[side + "_cached"] = cached
                # The row's worst case: the least cached hot run, the most cached cold one.
                worst = min if mode == "hot" else max
                cached = worst(cached)
                row["cached"] = worst(row.get("cached", cached), cached)
                log(f"{shape} {mode} {side}: {med:.2f} GB/s {['%.2f' % r for r in all_]} (cached {cached:.3f})")
            rows.append(row)
        del dev

    def cell(r, k):
        return f"{r[k]:.2f}" if k in r else "-"

    def ratio(r, a, b):
        return f"{r[a] / r[b]:.3f}" if a in r and b in r else "-"

    lines = [
        "| shape | mode | cached | hipfile Python GB/s | KvikIO GB/s | hipfile C GB/s | Python / KvikIO | Python / C |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['mode']} | {r['cached']:.3f} "
            f"| {cell(r, 'python')} | {cell(r, 'kvikio')} | {cell(r, 'c')} "
            f"| {ratio(r, 'python', 'kvikio')} | {ratio(r, 'python', 'c')} |"
        )
    if also:
        lines += ["", "| shape | mode | hipfile C GB/s | " + " | ".join(f"{n} GB/s | C / {n}" for n in also) + " |"]
        lines.append("|---|---|---|" + "---|---|" * len(also))
        for r in rows:
            extra = " | ".join(f"{cell(r, n)} | {ratio(r, 'c', n)}" for n in also)
            lines.append(f"| {r['shape']} | {r['mode']} | {cell(r, 'c')} | {extra} |")
    table = "\n".join(lines)
    print(table)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "loader_shapes.md"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(out, "loader_shapes.json"), "w") as f:
            json.dump({"batch": args.batch, "repeat": args.repeat, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
