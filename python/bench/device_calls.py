#!/usr/bin/env python3
"""What one File.read into a PyTorch CUDA tensor costs from Python, per call.

For each block size, many page-cache-hot reads of FILE into one unregistered
torch.empty(..., device="cuda") tensor, and beside them what describing such
a tensor costs in Python alone (PyTorch's __cuda_array_interface__, built in
Python on every access, against the C-level data_ptr() and nbytes). Median
of --rounds rounds, microseconds per call.

  python3 python/bench/device_calls.py FILE [--rounds 5]
"""

import argparse
import os
import statistics
import time

import torch

import hipfile


def per_call(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    size = os.path.getsize(a.file)
    with open(a.file, "rb") as f:  # page-cache hot
        while f.read(1 << 20):
            pass
    t = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    rows = [
        ("t.__cuda_array_interface__", lambda: t.__cuda_array_interface__, 20000),
        ("t.data_ptr(), t.nbytes", lambda: (t.data_ptr(), t.nbytes), 20000),
    ]
    f = hipfile.open(a.file)
    for bs, n in [(4096, 20000), (65536, 10000), (1 << 20, 1000), (4 << 20, 300)]:
        if bs > size:
            continue
        offs = max(1, size // bs)
        state = {"i": 0}

        def read(bs=bs, offs=offs, state=state):
            state["i"] = (state["i"] + 1) % offs
            f.read(t, size=bs, file_offset=state["i"] * bs)

        rows.append((f"File.read {bs // 1024} KiB", read, n))
    for _, fn, n in rows:  # untimed: the engine's threads, the caches
        per_call(fn, max(1, n // 10))
    res = {name: [] for name, _, _ in rows}
    for _ in range(a.rounds):
        for name, fn, n in rows:
            res[name].append(per_call(fn, n))
    torch.cuda.synchronize()
    f.close()
    print(f"{a.file}, {a.rounds} rounds, kernel {os.uname().release}, {torch.cuda.get_device_name()}")
    print("| call | µs per call, median (min-max) |")
    print("|---|---|")
    for name, v in res.items():
        v = sorted(v)
        print(f"| {name} | {statistics.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f}) |")


if __name__ == "__main__":
    main()
