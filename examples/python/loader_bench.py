#!/usr/bin/env python3
"""A PyTorch data loader over hipfile that trains nothing and measures
samples/s: one sample per file in a directory (made with --make), read into
GPU tensors (CPU tensors without a GPU), first in this process alone, then
through a DataLoader with --workers worker processes.

    python3 examples/python/loader_bench.py DIR --make 8192 256   # 8192 x 256 KiB
    python3 examples/python/loader_bench.py DIR --workers 8 --batch 64

Workers use the "spawn" start method when CUDA is usable (device reads in
the workers need it), else "fork". Each worker sizes its engine with
--worker-io-threads (hipfile.configure in worker_init_fn), so eight workers
do not each start one I/O thread per core. The page cache is left as it is:
the first pass reads what it does not hold.
"""

import argparse
import os
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

import hipfile
from hipfile.torch import BatchDataset, FileDataset


def worker_init(io_threads):
    def init(_):
        hipfile.configure(io_threads=io_threads)

    return init


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--make", nargs=2, type=int, metavar=("COUNT", "KIB"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--worker-io-threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args()

    if args.make:
        count, kib = args.make
        os.makedirs(args.dir, exist_ok=True)
        block = (np.arange(kib * 1024, dtype=np.uint32) * 2654435761 >> 9).astype(np.uint8)
        for i in range(count):
            block.tofile(os.path.join(args.dir, f"s{i:06d}.bin"))
        print(f"wrote {count} files of {kib} KiB")

    ds = FileDataset(args.dir)
    n = len(ds)
    batches = BatchDataset(ds, args.batch)
    print(f"{n} samples, batches of {args.batch}, tensors on {ds.device}")

    for p in range(args.passes):
        t0 = time.perf_counter()
        for b in batches:
            pass
        if b.is_cuda:
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        print(f"1 process, pass {p + 1}: {n / s:.0f} samples/s")

    method = "spawn" if ds.device.type == "cuda" else "fork"
    dl = DataLoader(
        batches,
        batch_size=None,
        num_workers=args.workers,
        multiprocessing_context=method,
        worker_init_fn=worker_init(args.worker_io_threads),
        persistent_workers=True,
        prefetch_factor=2,
    )
    for p in range(args.passes):
        t0 = time.perf_counter()
        seen = 0
        for b in dl:
            seen += b.shape[0]
        s = time.perf_counter() - t0
        print(f"DataLoader, {args.workers} {method} workers, pass {p + 1}: {seen / s:.0f} samples/s")


if __name__ == "__main__":
    main()
