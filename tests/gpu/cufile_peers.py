#!/usr/bin/env python3
"""cuFile programs on hipfile-rs, on the GPU machine (scripts/gpu-run.sh, suite cufile).

Each case runs in a child process with its own environment and prints one
"RESULT {json}" line; this script runs them, checks them and writes a table:

  kvikio-ours-*    KvikIO 26.10 with KVIKIO_COMPAT_MODE=OFF and hipfile-rs's
                   libcufile.so.0 first on LD_LIBRARY_PATH reads a 4 GiB file into
                   CuPy memory; every byte is compared with the file. With KvikIO's
                   default thread count and with 16 threads.
  kvikio-compat-*  the same read with KvikIO's defaults (KVIKIO_COMPAT_MODE=AUTO)
                   and NVIDIA's libcufile where the loader finds it: on a machine
                   without GDS, KvikIO's own compat mode. Same run, same file.
  torch-gds        torch.cuda.gds.GdsFile saves a tensor and loads it back (into a
                   plain and a registered buffer) through hipfile-rs's libcufile;
                   the file's bytes and the loaded tensor must equal the saved one.
  hipfile-auto     libhipfile with no HIPFILE_BACKEND: it must decide that GDS does
                   not work here, log why, and serve a read into device memory from
                   the engine, all within the time limit.
  hipfile-forced / nvidia-direct
                   HIPFILE_BACKEND=cufile sends libhipfile's calls to NVIDIA's
                   libcufile: its answers to driver open and file registration must
                   be those NVIDIA's library gives when called directly.
  probe            hipfile-gds-probe run by hand on NVIDIA's libcufile, for the record.

A library that is not the one a case needs (checked in /proc/self/maps) fails the
case; where LD_LIBRARY_PATH alone does not make a program load hipfile-rs's
libcufile.so.0, the case is retried with LD_PRELOAD and the table says so.

Usage: cufile_peers.py WORK_DIR OUT_DIR
Environment: HIPFILE_CUFILE_DIR (the directory of hipfile-rs's libcufile.so.0),
HIPFILE_LIB_DIR (libhipfile.so and hipfile-gds-probe), PYTHONPATH with KvikIO.
Exit status 0 only when every correctness check passed.
"""
import glob
import json
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


def case_kvikio(path, expect_ours):
    import cupy
    import kvikio
    import kvikio.defaults

    arr = cupy.empty(FILE_BYTES, dtype=cupy.uint8)
    rates = []
    with kvikio.CuFile(path, "r") as f:
        for _ in range(3):
            arr.fill(0)
            cupy.cuda.runtime.deviceSynchronize()
            t = time.perf_counter()
            n = f.read(arr)
            cupy.cuda.runtime.deviceSynchronize()
            rates.append(n / (time.perf_counter() - t) / 1e9)
            if n != FILE_BYTES:
                return result(ok=False, why=f"read returned {n}")
    libs = mapped_libcufiles()
    if expect_ours and libs != [ours()]:
        return result(ok=False, wrong_library=True, why=f"libcufile mapped: {libs}", libs=libs)
    bad = equal_to_file(arr, path)
    result(
        ok=bad is None,
        why=bad,
        gbps=rates,
        median=statistics.median(rates),
        threads=kvikio.defaults.get("num_threads"),
        compat_preferred=kvikio.defaults.is_compat_mode_preferred(),
        libs=libs,
    )


def case_torch(work):
    import numpy as np
    import torch
    from torch.cuda.gds import GdsFile, gds_deregister_buffer, gds_register_buffer

    path = os.path.join(work, "torch-gds.bin")
    n = (64 << 20) + 4096
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
    f = GdsFile(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC)
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
    f.deregister_handle()
    on_disk = np.fromfile(path, dtype=np.uint8)
    file_ok = len(on_disk) == n + 4096 and np.array_equal(on_disk[:n], src.cpu().numpy())
    tail_ok = np.array_equal(on_disk[n:], src[:4096].cpu().numpy())
    libs = mapped_libcufiles()
    os.unlink(path)
    if libs != [ours()]:
        return result(ok=False, wrong_library=True, why=f"libcufile mapped: {libs}", libs=libs)
    result(
        ok=plain and registered and file_ok and tail_ok,
        plain_load=plain,
        registered_load=registered,
        file_bytes=file_ok and tail_ok,
        libs=libs,
        torch=torch.__version__,
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
    result(
        # The engine served: no libcufile was ever loaded.
        ok=e.err == 0 and err == 0 and same and close.err == 0 and not libs,
        open=e.err,
        register=err,
        read=got,
        bytes_match=same,
        seconds=time.perf_counter() - t0,
        libs=libs,
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


def warm(path):
    with open(path, "rb", buffering=0) as f:
        while f.read(64 << 20):
            pass


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--case":
        name, rest = sys.argv[2], sys.argv[3:]
        try:
            {
                "kvikio-ours": lambda: case_kvikio(rest[0], True),
                "kvikio-compat": lambda: case_kvikio(rest[0], False),
                "torch-gds": lambda: case_torch(rest[0]),
                "hipfile-auto": lambda: case_hipfile_auto(rest[0]),
                "hipfile-forced": lambda: case_hipfile_forced(rest[0]),
                "nvidia-direct": lambda: case_nvidia_direct(rest[0]),
            }[name]()
        except Exception as e:  # reported as the case's result, with the library it ran on
            libs = mapped_libcufiles()
            needs_ours = name in ("kvikio-ours", "torch-gds")
            result(ok=False, why=repr(e), libs=libs, wrong_library=needs_ours and libs != [ours()])
        return 0
    work, out = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(work, "cufile-peers-4g.bin")
    make_file(path)
    warm(path)
    base = dict(os.environ)
    base.pop("KVIKIO_COMPAT_MODE", None)
    base.pop("KVIKIO_NTHREADS", None)
    base.pop("HIPFILE_BACKEND", None)
    rows, failures = [], []

    def record(label, r, correctness=True):
        rows.append((label, r))
        if correctness and not r.get("ok"):
            failures.append(label)
        print(f"{label}: {json.dumps({k: v for k, v in r.items() if k != 'stderr'})}", flush=True)

    for threads in (None, 16):
        tag = "default threads" if threads is None else f"{threads} threads"
        e = dict(base, KVIKIO_COMPAT_MODE="OFF")
        if threads:
            e["KVIKIO_NTHREADS"] = str(threads)
        record(f"kvikio-ours ({tag})", run_with_ours("kvikio-ours", [path], e, 120))
        e = dict(base)
        if threads:
            e["KVIKIO_NTHREADS"] = str(threads)
        record(f"kvikio-compat ({tag})", run_case("kvikio-compat", [path], e, 120))
    record("torch-gds", run_with_ours("torch-gds", [work], base, 120))
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

    with open(os.path.join(out, "cufile_peers.md"), "w") as md:
        md.write(f"# cuFile peers, {time.strftime('%Y-%m-%d %H:%M:%S')}, kernel {os.uname().release}\n\n")
        md.write("| case | correct | GB/s (median of 3; runs) | notes |\n|---|---|---|---|\n")
        for label, r in rows:
            rate = f"{r['median']:.2f} ({', '.join(f'{x:.2f}' for x in r['gbps'])})" if "median" in r else ""
            notes = {k: r[k] for k in ("how", "threads", "compat_preferred", "libs", "decision", "open", "register",
                                       "result", "why", "wall_s", "torch") if k in r and r[k] not in (None, "")}
            md.write(f"| {label} | {'yes' if r.get('ok') else 'NO'} | {rate} | {json.dumps(notes)} |\n")
        md.write("\nFailed: " + (", ".join(failures) if failures else "none") + "\n")
    with open(os.path.join(out, "cufile_peers.json"), "w") as js:
        json.dump([{"case": l, **r} for l, r in rows], js, indent=1)
    print("failed: " + (", ".join(failures) if failures else "none"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
