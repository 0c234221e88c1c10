#!/usr/bin/env python3
"""cuFile programs on hipfile-rs, on the GPU machine (scripts/gpu-run.sh, suite cufile).

Each case runs in a child process with its own environment and prints one
"RESULT {json}" line; this script runs them, checks them and writes a table:

  kvikio-ours      KvikIO 26.10 with KVIKIO_COMPAT_MODE=OFF on hipfile-rs's
                   libcufile.so.0 reads a 4 GiB file into CuPy memory; every byte
                   is compared with the file.
  kvikio-compat    the same read with KvikIO's defaults (KVIKIO_COMPAT_MODE=AUTO)
                   and NVIDIA's libcufile where the loader finds it: on a machine
                   without GDS, KvikIO's own compat mode.
                   The two are measured like for like, each with KvikIO's default
                   thread count and with 16 threads:
                   hot:  the file is read into the page cache first and its
                         residency checked (mincore) before every run; the two
                         sides alternate (ABBA) over PEERS_ROUNDS rounds (default 2),
                         each run a fresh process timing 3 reads;
                   cold: the file's pages are dropped before every run (sync and
                         /proc/sys/vm/drop_caches as root, and
                         posix_fadvise(DONTNEED) on the file always), residency
                         checked, and the run times one read. PEERS_COLD=0 skips it.
                   Our library's own statistics (cuFileGetStatsL1 through it) count
                   the bytes it served, which proves which library did the reads.
  torch-gds        torch.cuda.gds.GdsFile saves a tensor and loads it back (into a
                   plain and a registered buffer) with hipfile-rs's libcufile
                   LD_PRELOADed (PyTorch's wheel links NVIDIA's libcufile, which
                   stays mapped): the file's bytes and the loaded tensor must equal
                   the saved one, and our library's statistics must count every
                   byte torch moved. dladdr on each cuFile symbol's global
                   definition records which file the calls bind to.
  hipfile-auto     libhipfile with no HIPFILE_BACKEND: it must decide that GDS does
                   not work here, log why, and serve a read into device memory from
                   the engine, all within the time limit.
  hipfile-forced / nvidia-direct
                   HIPFILE_BACKEND=cufile sends libhipfile's calls to NVIDIA's
                   libcufile: its answers to driver open and file registration must
                   be those NVIDIA's library gives when called directly.
  probe            hipfile-gds-probe run by hand on NVIDIA's libcufile, for the record.

A case that needs hipfile-rs's library fails when that library did not serve
its I/O (its statistics count nothing, or it is not mapped at all); where
LD_LIBRARY_PATH alone does not make KvikIO load hipfile-rs's libcufile.so.0,
the case is retried with LD_PRELOAD and the table says so. Every child runs
under a time limit, and PEERS_BUDGET_S (default 300) bounds the KvikIO runs as
a whole: runs left out for time are listed as not run, never as passed. The
tables are rewritten after every case, so a run cut short leaves what it had.

Usage: cufile_peers.py WORK_DIR OUT_DIR
Environment: HIPFILE_CUFILE_DIR (the directory of hipfile-rs's libcufile.so.0),
HIPFILE_LIB_DIR (libhipfile.so and hipfile-gds-probe), PYTHONPATH with KvikIO.
Exit status 0 only when every correctness check passed.
"""
import ctypes
import glob
import json
import mmap
import os
import statistics
import subprocess
import sys
import time

GIB = 1 << 30
FILE_BYTES = 4 * GIB
CHUNK = 256 << 20


def nvidia_libcufile():
    for p in ["/usr/local/cuda/lib64/libcufile.so.0"] + sorted(
        glob.glob("/usr/local/cuda*/targets/*/lib/libcufile.so.0")
    ):
        if os.path.exists(p):
            return os.path.realpath(p)
    return None


def mapped_libcufiles():
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "libcufile" in os.path.basename(parts[5]):
                libs.add(os.path.realpath(parts[5]))
    return sorted(libs)


def ours():
    return os.path.realpath(os.path.join(os.environ["HIPFILE_CUFILE_DIR"], "libcufile.so.0"))


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


class CuErr(ctypes.Structure):
    """CUfileError_t (and hipFileError_t): {int err; int cu_err}."""

    _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]


# ---------------------------------------------------------------------------
# Page-cache residency (both sides of a comparison must start from the same state)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident(path):
    """Fraction of `path`'s pages in the page cache: mincore over a read-only
    shared mapping, which faults nothing in."""
    size = os.path.getsize(path)
    if size == 0:
        return 1.0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(v & 1 for v in bytes(vec)) / pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def warm(path):
    """Read `path` through the page cache until mincore sees it all resident
    (two passes at most: memory pressure can evict). Returns the residency."""
    for _ in range(2):
        with open(path, "rb", buffering=0) as f:
            while f.read(64 << 20):
                pass
        r = resident(path)
        if r >= 0.999:
            break
    return r


def make_cold(path):
    """Drop `path` from the page cache. Returns (residency after, how)."""
    how = []
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        how.append("drop_caches")
    except OSError as e:
        how.append(f"no drop_caches ({e.strerror})")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        how.append("fadvise DONTNEED")
    finally:
        os.close(fd)
    return resident(path), ", ".join(how)


# ---------------------------------------------------------------------------
# Evidence of which libcufile serves a process (used inside the children)


class OurStats:
    """hipfile-rs's libcufile's level-1 statistics, read through its own
    cuFile statistics calls: the bytes it served in this process. Opening the
    driver here takes a use count of our library only; the program's own
    cuFileDriverOpen/Close pair is unaffected."""

    # Offsets in CUfileStatsLevel1_t (cufile.h 1.15; cufile/src/types.rs
    # checks them against the header).
    FIELDS = {"read_ops_ok": 0, "read_ops_err": 8, "write_ops_ok": 16, "write_ops_err": 24,
              "read_bytes": 96, "write_bytes": 104, "read_lat_avg_us": 128, "write_lat_avg_us": 136}

    def __init__(self):
        self.lib = ctypes.CDLL(ours())
        for name in ("cuFileDriverOpen", "cuFileDriverClose_v2", "cuFileSetStatsLevel", "cuFileStatsStart",
                     "cuFileGetStatsL1"):
            getattr(self.lib, name).restype = CuErr
        self.lib.cuFileSetStatsLevel.argtypes = [ctypes.c_int]
        e = self.lib.cuFileDriverOpen()
        s1 = self.lib.cuFileSetStatsLevel(1)
        s2 = self.lib.cuFileStatsStart()
        if e.err or s1.err or s2.err:
            raise RuntimeError(f"our statistics: open {e.err}, level {s1.err}, start {s2.err}")

    def read(self):
        import struct

        buf = ctypes.create_string_buffer(512)
        e = self.lib.cuFileGetStatsL1(buf)
        if e.err:
            return {"error": e.err}
        return {k: struct.unpack_from("<Q", buf.raw, off)[0] for k, off in self.FIELDS.items()}

    def close(self):
        self.lib.cuFileDriverClose_v2()


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def symbol_owners(names):
    """The file that defines each symbol in the process's global scope (main
    program, LD_PRELOAD, their dependencies, RTLD_GLOBAL objects): where a
    library loaded later binds an undefined cuFile* reference first, unless it
    was opened with RTLD_DEEPBIND. dlsym through dlopen(NULL), then dladdr."""
    g = ctypes.CDLL(None)
    g.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    out = {}
    for n in names:
        try:
            addr = ctypes.cast(getattr(g, n), ctypes.c_void_p).value
        except AttributeError:
            out[n] = None
            continue
        info = DlInfo()
        out[n] = os.path.realpath(info.dli_fname.decode()) if g.dladdr(addr, ctypes.byref(info)) and info.dli_fname else "?"
    return out


CUFILE_SYMBOLS = ["cuFileDriverOpen", "cuFileHandleRegister", "cuFileRead", "cuFileWrite", "cuFileBufRegister"]


# ---------------------------------------------------------------------------
# Cases (run in children)


def equal_to_file(arr, path):
    import numpy as np

    with open(path, "rb") as f:
        for off in range(0, FILE_BYTES, CHUNK):
            want = np.frombuffer(f.read(CHUNK), dtype=np.uint8)
            got = arr[off : off + len(want)].get()
            if not np.array_equal(got, want):
                bad = int(np.flatnonzero(got != want)[0])
                return f"differs at byte {off + bad}"
    return None


def case_kvikio(path, expect_ours, reps):
    import cupy
    import kvikio
    import kvikio.defaults

    arr = cupy.empty(FILE_BYTES, dtype=cupy.uint8)
    rates = []
    stats = None
    cached = resident(path)
    with kvikio.CuFile(path, "r") as f:
        libs = mapped_libcufiles()
        if expect_ours:
            if ours() not in libs:
                return result(ok=False, wrong_library=True, why=f"libcufile mapped: {libs}", libs=libs)
            stats = OurStats()
        for _ in range(reps):
            arr.fill(0)
            cupy.cuda.runtime.deviceSynchronize()
            t = time.perf_counter()
            n = f.read(arr)
            cupy.cuda.runtime.deviceSynchronize()
            rates.append(n / (time.perf_counter() - t) / 1e9)
            if n != FILE_BYTES:
                return result(ok=False, why=f"read returned {n}", libs=libs)
    counted = stats.read() if stats else None
    if stats:
        stats.close()
    served = None
    if expect_ours:
        served = bool(counted) and counted.get("read_bytes", 0) >= reps * FILE_BYTES
        if not served:
            return result(ok=False, wrong_library=True, libs=libs, ours_counted=counted,
                          why=f"hipfile-rs's libcufile counted {counted} for {reps} reads of {FILE_BYTES} bytes")
    bad = equal_to_file(arr, path)
    result(
        ok=bad is None,
        why=bad,
        gbps=rates,
        median=statistics.median(rates),
        threads=kvikio.defaults.get("num_threads"),
        compat_preferred=kvikio.defaults.is_compat_mode_preferred(),
        libs=libs,
        cached_before=round(cached, 4),
        cached_after=round(resident(path), 4),
        ours_counted=counted,
    )


def case_torch(work):
    import numpy as np
    import torch
    from torch.cuda.gds import GdsFile, gds_deregister_buffer, gds_register_buffer

    path = os.path.join(work, "torch-gds.bin")
    n = (64 << 20) + 4096
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
    f = GdsFile(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC)
    libs = mapped_libcufiles()
    owners = symbol_owners(CUFILE_SYMBOLS)
    # Counting starts after torch opened the driver and registered the file
    # its own way, so torch's calls run as they would without this check.
    stats = OurStats() if ours() in libs else None
    f.save_storage(src.untyped_storage(), offset=0)
    f.save_storage(src[:4096].clone().untyped_storage(), offset=n)
    dst = torch.zeros_like(src)
    f.load_storage(dst.untyped_storage(), offset=0)
    plain = torch.equal(src, dst)
    reg = torch.zeros_like(src)
    gds_register_buffer(reg.untyped_storage())
    f.load_storage(reg.untyped_storage(), offset=0)
    gds_deregister_buffer(reg.untyped_storage())
    registered = torch.equal(src, reg)
    counted = stats.read() if stats else None
    f.deregister_handle()
    if stats:
        stats.close()
    on_disk = np.fromfile(path, dtype=np.uint8)
    file_ok = len(on_disk) == n + 4096 and np.array_equal(on_disk[:n], src.cpu().numpy())
    tail_ok = np.array_equal(on_disk[n:], src[:4096].cpu().numpy())
    os.unlink(path)
    # Ours served when it counted every byte torch moved: two saves (n + 4096
    # bytes) and two loads (2n).
    served = bool(counted) and counted.get("write_bytes", 0) >= n + 4096 and counted.get("read_bytes", 0) >= 2 * n
    evidence = dict(libs=libs, symbols=owners, ours_counted=counted, torch=torch.__version__)
    if not served:
        bound = sorted({v for v in owners.values() if v})
        return result(
            ok=False,
            wrong_library=True,
            why=("torch's cuFile calls did not reach hipfile-rs's libcufile: it counted "
                 f"{counted} for {2 * n} bytes read and {n + 4096} written; the global cuFile "
                 f"symbols are defined in {bound}"),
            plain_load=plain, registered_load=registered, file_bytes=file_ok and tail_ok, **evidence)
    result(
        ok=plain and registered and file_ok and tail_ok,
        plain_load=plain,
        registered_load=registered,
        file_bytes=file_ok and tail_ok,
        served_by_ours=served,
        **evidence,
    )


def hipfile_lib():
    import ctypes

    lib = ctypes.CDLL(os.path.join(os.environ["HIPFILE_LIB_DIR"], "libhipfile.so"))

    class Err(ctypes.Structure):
        _fields_ = [("err", ctypes.c_int), ("drv", ctypes.c_int)]

    class Descr(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("pad", ctypes.c_int), ("fd", ctypes.c_int), ("high", ctypes.c_int), ("ops", ctypes.c_void_p)]

    for name in ("hipFileDriverOpen", "hipFileDriverClose"):
        getattr(lib, name).restype = Err
    lib.hipFileHandleRegister.restype = Err
    lib.hipFileHandleRegister.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Descr)]
    lib.hipFileHandleDeregister.argtypes = [ctypes.c_void_p]
    lib.hipFileRead.restype = ctypes.c_ssize_t
    lib.hipFileRead.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64]
    return lib, Descr


def register(lib, Descr, fd):
    import ctypes

    fh = ctypes.c_void_p()
    d = Descr(1, 0, fd, 0, None)
    e = lib.hipFileHandleRegister(ctypes.byref(fh), ctypes.byref(d))
    return e.err, fh


def case_hipfile_auto(path):
    import torch

    # PyTorch's wheel maps its own libcufile at import; what counts is that
    # libhipfile loads none beside it.
    before = mapped_libcufiles()
    t0 = time.perf_counter()
    lib, Descr = hipfile_lib()
    e = lib.hipFileDriverOpen()
    fd = os.open(path, os.O_RDONLY)
    err, fh = register(lib, Descr, fd)
    n = 64 << 20
    dev = torch.zeros(n, dtype=torch.uint8, device="cuda")
    got = lib.hipFileRead(fh, dev.data_ptr(), n, 12345, 0)
    with open(path, "rb") as f:
        f.seek(12345)
        want = torch.frombuffer(bytearray(f.read(n)), dtype=torch.uint8)
    same = got == n and torch.equal(dev.cpu(), want)
    lib.hipFileHandleDeregister(fh)
    os.close(fd)
    close = lib.hipFileDriverClose()
    libs = mapped_libcufiles()
    loaded = sorted(set(libs) - set(before))
    result(
        # The engine served: libhipfile loaded no libcufile.
        ok=e.err == 0 and err == 0 and same and close.err == 0 and not loaded,
        open=e.err,
        register=err,
        read=got,
        bytes_match=same,
        seconds=time.perf_counter() - t0,
        libs=libs,
        loaded_by_hipfile=loaded,
    )


def case_hipfile_forced(path):
    lib, Descr = hipfile_lib()
    e = lib.hipFileDriverOpen()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    err, fh = register(lib, Descr, fd)
    if err == 0:
        lib.hipFileHandleDeregister(fh)
    os.close(fd)
    lib.hipFileDriverClose()
    result(ok=True, open=e.err, register=err, libs=mapped_libcufiles())


def case_nvidia_direct(path):
    import ctypes

    lib = ctypes.CDLL(nvidia_libcufile(), mode=os.RTLD_LOCAL | os.RTLD_NOW)

    class Err(ctypes.Structure):
        _fields_ = [("err", ctypes.c_int), ("drv", ctypes.c_int)]

    class Descr(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("pad", ctypes.c_int), ("fd", ctypes.c_int), ("high", ctypes.c_int), ("ops", ctypes.c_void_p)]

    lib.cuFileDriverOpen.restype = Err
    lib.cuFileHandleRegister.restype = Err
    e = lib.cuFileDriverOpen()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    fh = ctypes.c_void_p()
    r = lib.cuFileHandleRegister(ctypes.byref(fh), ctypes.byref(Descr(1, 0, fd, 0, None)))
    os.close(fd)
    result(ok=True, open=e.err, register=r.err)


# ---------------------------------------------------------------------------
# Orchestration


def run_case(name, args, env, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--case", name] + args
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return {"ok": False, "why": f"HANG: no result within {timeout} s", "stderr": str(e.stderr or "")[-2000:]}
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:
        res = {"ok": False, "why": f"exit {p.returncode}, no result", "stdout": p.stdout[-2000:]}
    res["stderr"] = p.stderr[-4000:]
    res["wall_s"] = round(time.perf_counter() - t, 2)
    return res


def with_ours(env, preload):
    e = dict(env)
    d = os.environ["HIPFILE_CUFILE_DIR"]
    e["LD_LIBRARY_PATH"] = d + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if preload:
        e["LD_PRELOAD"] = ours()
    return e


def run_with_ours(name, args, env, timeout):
    """LD_LIBRARY_PATH first (the documented recipe); LD_PRELOAD if that was not enough."""
    r = run_case(name, args, with_ours(env, False), timeout)
    r["how"] = "LD_LIBRARY_PATH"
    if r.get("wrong_library"):
        first = r
        r = run_case(name, args, with_ours(env, True), timeout)
        r["how"] = f"LD_PRELOAD (LD_LIBRARY_PATH alone loaded {first.get('libs')})"
    return r


def make_file(path):
    if os.path.exists(path) and os.path.getsize(path) == FILE_BYTES:
        return
    import numpy as np

    rng = np.random.default_rng(20261204)
    with open(path + ".tmp", "wb") as f:
        for _ in range(FILE_BYTES // CHUNK):
            f.write(rng.bytes(CHUNK))
    os.rename(path + ".tmp", path)


def write_tables(out, rows, compare, failures):
    """cufile_peers.md (the comparison, then every case) and cufile_peers.json."""
    fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
    with open(os.path.join(out, "cufile_peers.md"), "w") as md:
        md.write(f"# cuFile peers, {time.strftime('%Y-%m-%d %H:%M:%S')}, kernel {os.uname().release}\n\n")
        if compare:
            md.write("KvikIO reads the 4 GiB file into CuPy memory, KVIKIO_COMPAT_MODE=OFF on hipfile-rs's "
                     "libcufile (ours) against KvikIO's compat mode, each run a fresh process; hot: median "
                     "of 3 reads per process, cold: one read after dropping the file's pages. GB/s: median "
                     "over processes (each process's figure in brackets).\n\n")
            md.write("| threads | cache | ours GB/s | compat GB/s | ours / compat | resident at start |\n"
                     "|---|---|---|---|---|---|\n")
            keys = []
            for side, tag, mode, _ in compare:
                if (tag, mode) not in keys:
                    keys.append((tag, mode))
            for tag, mode in keys:
                got = {}
                cached = []
                for side, t, m, r in compare:
                    if (t, m) == (tag, mode) and r.get("ok") and "median" in r:
                        got.setdefault(side, []).append(r["median"])
                        cached.append(r.get("cached_before", float("nan")))
                cell = lambda side: (f"{statistics.median(got[side]):.2f} ({fmt(got[side])})" if side in got else "no correct run")
                ratio = (f"{statistics.median(got['ours']) / statistics.median(got['compat']):.2f}"
                         if "ours" in got and "compat" in got else "")
                res = f"{min(cached):.3f}–{max(cached):.3f}" if cached else ""
                md.write(f"| {tag} | {mode} | {cell('ours')} | {cell('compat')} | {ratio} | {res} |\n")
            md.write("\n")
        md.write("| case | correct | GB/s (median; runs) | notes |\n|---|---|---|---|\n")
        for label, r in rows:
            rate = f"{r['median']:.2f} ({fmt(r['gbps'])})" if "median" in r else ""
            notes = {k: r[k] for k in ("how", "threads", "compat_preferred", "cache_prep", "cached_after", "ours_counted",
                                       "served_by_ours", "symbols", "libs", "loaded_by_hipfile", "decision", "open", "register", "result",
                                       "why", "wall_s", "torch") if k in r and r[k] not in (None, "")}
            md.write(f"| {label} | {'yes' if r.get('ok') else 'NO'} | {rate} | {json.dumps(notes)} |\n")
        md.write("\nFailed: " + (", ".join(failures) if failures else "none") + "\n")
    with open(os.path.join(out, "cufile_peers.json"), "w") as js:
        json.dump([{"case": l, **r} for l, r in rows], js, indent=1)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--case":
        name, rest = sys.argv[2], sys.argv[3:]
        try:
            {
                "kvikio-ours": lambda: case_kvikio(rest[0], True, int(rest[1])),
                "kvikio-compat": lambda: case_kvikio(rest[0], False, int(rest[1])),
                "torch-gds": lambda: case_torch(rest[0]),
                "hipfile-auto": lambda: case_hipfile_auto(rest[0]),
                "hipfile-forced": lambda: case_hipfile_forced(rest[0]),
                "nvidia-direct": lambda: case_nvidia_direct(rest[0]),
            }[name]()
        except Exception as e:  # reported as the case's result, with the library it ran on
            libs = mapped_libcufiles()
            needs_ours = name in ("kvikio-ours", "torch-gds")
            result(ok=False, why=repr(e), libs=libs, wrong_library=needs_ours and ours() not in libs)
        return 0
    work, out = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(work, "cufile-peers-4g.bin")
    make_file(path)
    base = dict(os.environ)
    base.pop("KVIKIO_COMPAT_MODE", None)
    base.pop("KVIKIO_NTHREADS", None)
    base.pop("HIPFILE_BACKEND", None)
    rows, failures, compare = [], [], []

    def record(label, r, correctness=True):
        rows.append((label, r))
        if correctness and not r.get("ok"):
            failures.append(label)
        print(f"{label}: {json.dumps({k: v for k, v in r.items() if k != 'stderr'})}", flush=True)
        write_tables(out, rows, compare, failures)

    rounds = int(os.environ.get("PEERS_ROUNDS", "2"))
    cold = os.environ.get("PEERS_COLD", "1") != "0"
    deadline = time.monotonic() + float(os.environ.get("PEERS_BUDGET_S", "300"))
    preload = None  # how KvikIO gets our library: learnt on its first run

    def kvikio_run(side, threads, mode):
        nonlocal preload
        tag = "default threads" if threads is None else f"{threads} threads"
        label = f"kvikio-{side} ({tag}, {mode})"
        if time.monotonic() > deadline:
            record(label, {"ok": False, "why": "not run: PEERS_BUDGET_S spent"})
            return
        if mode == "hot":
            cache = warm(path)
            prep = "read through the page cache"
        else:
            cache, prep = make_cold(path)
        if (mode == "hot" and cache < 0.99) or (mode == "cold" and cache > 0.01):
            record(label, {"ok": False, "why": f"not run: the file is {cache:.3f} resident after '{prep}'"})
            return
        e = dict(base)
        if threads:
            e["KVIKIO_NTHREADS"] = str(threads)
        args = [path, "3" if mode == "hot" else "1"]
        if side == "ours":
            e["KVIKIO_COMPAT_MODE"] = "OFF"
            if preload is None:
                r = run_with_ours("kvikio-ours", args, e, 150)
                preload = r["how"] != "LD_LIBRARY_PATH"
            else:
                r = run_case("kvikio-ours", args, with_ours(e, preload), 150)
                r["how"] = "LD_PRELOAD" if preload else "LD_LIBRARY_PATH"
        else:
            r = run_case("kvikio-compat", args, e, 150)
        r["cache_prep"] = f"{prep}: {cache:.3f} resident"
        compare.append((side, tag, mode, r))
        record(label, r)

    # PyTorch's wheel links NVIDIA's libcufile by its run path, which beats
    # LD_LIBRARY_PATH: only LD_PRELOAD puts our definitions first.
    r = run_case("torch-gds", [work], with_ours(base, True), 150)
    r["how"] = "LD_PRELOAD"
    record("torch-gds", r)
    e = dict(base, HIPFILE_LOG_LEVEL="info")
    r = run_case("hipfile-auto", [path], e, 60)
    log = r.get("stderr", "")
    # The passthrough's decision line; "storage backend:" is the engine's
    # io_uring/POSIX line, another matter.
    r["decision"] = [l for l in log.splitlines() if "backend:" in l and "storage backend:" not in l]
    if not (len(r["decision"]) == 1 and "backend: engine (" in r["decision"][0]):
        r["ok"] = False
        r["why"] = "no single 'backend: engine (...)' line in the log"
    record("hipfile-auto", r)
    nv = nvidia_libcufile()
    if nv:
        forced = run_case("hipfile-forced", [path], dict(e, HIPFILE_BACKEND="cufile"), 60)
        direct = run_case("nvidia-direct", [path], base, 60)
        forced["decision"] = [l for l in forced.get("stderr", "").splitlines() if "backend:" in l]
        same = (forced.get("open"), forced.get("register")) == (direct.get("open"), direct.get("register"))
        forced["ok"] = bool(forced.get("ok")) and same and any("passthrough" in l for l in forced["decision"])
        forced["why"] = f"NVIDIA's own answers: open {direct.get('open')}, register {direct.get('register')}"
        record("hipfile-forced (HIPFILE_BACKEND=cufile)", forced)
        probe = os.path.join(os.environ["HIPFILE_LIB_DIR"], "hipfile-gds-probe")
        try:
            p = subprocess.run(
                [probe, "--lib", nv, "--file", os.path.join(work, "gds-probe-file")],
                capture_output=True, text=True, timeout=60,
                env=dict(base, CUFILE_LOGFILE_PATH=os.path.join(work, "probe-cufile.log")),
            )
            line = [l for l in p.stdout.splitlines() if l.startswith("hipfile-gds-probe:")]
            record("probe (by hand)", {"ok": True, "result": line, "why": p.stderr.strip()[-300:]}, False)
        except subprocess.TimeoutExpired:
            record("probe (by hand)", {"ok": False, "why": "hipfile-gds-probe did not finish within 60 s"}, False)
    else:
        failures.append("NVIDIA's libcufile not found under /usr/local/cuda")

    # KvikIO last: its runs take the time budget, the cases above are short.
    for threads in (None, 16):
        for rnd in range(rounds):
            # ABBA: neither side always runs first after the warm-up.
            for side in (("ours", "compat") if rnd % 2 == 0 else ("compat", "ours")):
                kvikio_run(side, threads, "hot")
        if cold:
            for side in ("ours", "compat"):
                kvikio_run(side, threads, "cold")
    write_tables(out, rows, compare, failures)
    print("failed: " + (", ".join(failures) if failures else "none"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
