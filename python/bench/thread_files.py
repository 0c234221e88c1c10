#!/usr/bin/env python3
"""Many small files read whole by plain Python threads, into host memory
(or, with --mem device, a CUDA array):
where a thread-per-sample loader's time goes, against the standard library
and against the same calls from C, in one run.

Each of --threads threads takes every N-th file and reads it whole into its
own part of one NumPy array. Modes, taking turns round by round:

  open      hipfile.open + File.read + close per file (what a loader does)
  readfile  hipfile.read_file per file (the same in one call)
  opened    File.read only, on files opened before the round
  openonly  hipfile.open + close only, no read
  preadv    os.open + os.preadv + os.close per file (the standard library)
  batch     hipfile.read_batch from one thread, --batch files at a time
  c         bench/c/thread_files.c (--c-prog): register + hipFileRead +
            deregister per file from C threads

Every blocking call releases the GIL and takes it back when it returns; with
more threads than cores the hand-offs queue up, and the modes show how much
of that the library's calls add to what os.preadv pays too.

  python3 python/bench/thread_files.py --dir /tmp/tf --make 2048 262144 \\
      --threads 8 --rounds 5 --c-prog ./thread-files

Set OPENBLAS_NUM_THREADS=1 on a small machine: NumPy's OpenBLAS threads
otherwise spin beside the readers.
"""

import argparse
import os
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import hipfile


def make_files(root, files, size):
    os.makedirs(root, exist_ok=True)
    block = os.urandom(size)
    for i in range(files):
        p = os.path.join(root, str(i))
        if not os.path.exists(p) or os.path.getsize(p) != size:
            with open(p, "wb") as f:
                f.write(block)


def in_threads(threads, work):
    with ThreadPoolExecutor(threads) as ex:
        for r in [ex.submit(work, t) for t in range(threads)]:
            r.result()


def device_array(nbytes):
    """A device array of nbytes: a PyTorch CUDA tensor, else a CuPy array."""
    try:
        import torch

        return torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    except ImportError:
        import cupy

        return cupy.empty(nbytes, dtype=cupy.uint8)


def run_mode(mode, paths, size, threads, batch, arr, c_prog, root, device=False):
    """Seconds for one pass of `mode` over `paths`."""
    if mode == "c":
        out = subprocess.run(
            [c_prog, root, str(len(paths)), str(size), str(threads), "1"] + (["device"] if device else []),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        gbps = float(out.split(":")[-1].split()[0])
        return len(paths) * size / gbps / 1e9
    opened = [hipfile.open(p) for p in paths] if mode == "opened" else None

    def work(t):
        view = None if device else memoryview(arr)[t * size : (t + 1) * size]
        for i in range(t, len(paths), threads):
            if mode == "open":
                with hipfile.open(paths[i]) as f:
                    assert f.read(arr, size=size, buf_offset=t * size) == size
            elif mode == "readfile":
                assert hipfile.read_file(paths[i], arr, size=size, buf_offset=t * size) == size
            elif mode == "opened":
                assert opened[i].read(arr, size=size, buf_offset=t * size) == size
            elif mode == "openonly":
                hipfile.open(paths[i]).close()
            elif mode == "preadv":
                fd = os.open(paths[i], os.O_RDONLY)
                try:
                    assert os.preadv(fd, [view], 0) == size
                finally:
                    os.close(fd)

    t0 = time.perf_counter()
    if mode == "batch":
        for b in range(0, len(paths), batch):
            files = [hipfile.open(p) for p in paths[b : b + batch]]
            items = [(f, 0, size, arr, k * size) for k, f in enumerate(files)]
            assert hipfile.read_batch(items) == [size] * len(files)
            for f in files:
                f.close()
    else:
        in_threads(threads, work)
    s = time.perf_counter() - t0
    for f in opened or []:
        f.close()
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="the files are DIR/0, DIR/1, ...")
    ap.add_argument("--make", nargs=2, type=int, metavar=("FILES", "SIZE"), help="make FILES files of SIZE bytes")
    ap.add_argument("--files", type=int, default=None, help="files to read (default: as made, else 2048)")
    ap.add_argument("--size", type=int, default=None, help="bytes per file (default: the first file's size)")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="open,readfile,opened,openonly,preadv,batch,c")
    ap.add_argument("--c-prog", default=None, help="bench/c/thread_files.c, built (mode c)")
    ap.add_argument("--mem", choices=("host", "device"), default="host",
                    help="read into a NumPy array (host) or a PyTorch/CuPy CUDA array (device; no preadv mode)")
    a = ap.parse_args()
    device = a.mem == "device"
    if a.make:
        make_files(a.dir, *a.make)
    files = a.files or (a.make[0] if a.make else 2048)
    paths = [os.path.join(a.dir, str(i)) for i in range(files)]
    size = a.size or os.path.getsize(paths[0])
    modes = [m for m in a.modes.split(",") if m and (m != "c" or a.c_prog) and not (device and m == "preadv")]
    nbytes = max(a.threads, a.batch) * size
    arr = device_array(nbytes) if device else np.ones(nbytes, dtype=np.uint8)
    for p in paths:  # the page cache holds every file: all rows are hot
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass
    for m in modes:  # untimed: starts the engine and the C program's page faults
        run_mode(m, paths, size, a.threads, a.batch, arr, a.c_prog, a.dir, device)
    times = {m: [] for m in modes}
    for _ in range(a.rounds):
        for m in modes:
            times[m].append(run_mode(m, paths, size, a.threads, a.batch, arr, a.c_prog, a.dir, device))
    print(f"{files} files x {size} B into {a.mem} memory, {a.threads} threads (batch: one thread, {a.batch} files at a time), "
          f"{a.rounds} rounds, {os.cpu_count()} CPUs, kernel {os.uname().release}")
    print("| mode | GB/s, median (min-max) | µs per file, wall |")
    print("|---|---|---|")
    for m in modes:
        gb = sorted(files * size / s / 1e9 for s in times[m])
        wall = statistics.median(times[m]) / files * 1e6
        print(f"| {m} | {statistics.median(gb):.2f} ({gb[0]:.2f}-{gb[-1]:.2f}) | {wall:.1f} |")


if __name__ == "__main__":
    main()
