#!/usr/bin/env python3
"""One loader process against several: samples/s, GB/s, and the threads and
bounce memory each process holds, over a one-sample-per-file directory.

Rows (each after one untimed pass that warms the page cache and starts the
processes' I/O threads; the workers persist into the timed passes):
  num_workers=0            the main process reads every batch
  num_workers=N            N DataLoader worker processes, each capped by
                           hipfile.torch at max(2, cores // N) I/O threads
  num_workers=N uncapped   the same with HIPFILE_IO_THREADS=min(cores, 16)
                           set, so each worker may grow to the default

With PyTorch: hipfile.torch.FileDataset in a torch DataLoader (batch_size
--batch, each batch read with one hipfile.read_batch). Device tensors where
CUDA is usable (worker processes then use the "spawn" start method, since a
forked child cannot use CUDA), else CPU tensors ("fork"). Without PyTorch:
the same reads with hipfile.data.FileSamples into NumPy arrays, in the main
process or a multiprocessing pool of N forked processes, each capped with
hipfile.limit_io_threads as hipfile.torch would (the rows say "numpy").

Per process: Threads from /proc/self/status (every thread of the process,
PyTorch's included), and hipfile.usage(): the engine's I/O workers, their
bounce bytes and the part locked in memory (page-locked by the GPU runtime
or registered with io_uring), the largest seen over the timed passes.

Prints a markdown table; with $OUT set also writes dataloader_scaling.md
and dataloader_scaling.json there.

  python3 python/bench/dataloader_scaling.py --dir /tmp/hf-scaling \
      --files 4096 --size-kb 1024 --workers 8
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import hipfile
from hipfile.data import FileSamples

try:
    import torch
    from torch.utils.data import DataLoader

    from hipfile.torch import FileDataset, loader_io_threads
except ImportError:
    torch = None

    def loader_io_threads(num_workers):
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        return max(2, cores // max(1, num_workers))


def proc_threads():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def probe():
    """This process's pid, threads and engine usage."""
    u = hipfile.usage()
    return (os.getpid(), proc_threads(), u["workers"], u["bounce_bytes"], u["locked_bounce_bytes"])


def make_files(d, n, size):
    os.makedirs(d, exist_ok=True)
    have = sorted(x for x in os.listdir(d) if x.endswith(".bin"))
    if len(have) >= n and all(os.path.getsize(os.path.join(d, x)) == size for x in have[:n]):
        return [os.path.join(d, x) for x in have[:n]]
    print(f"making {n} files of {size} bytes in {d}", file=sys.stderr)
    rng = np.random.default_rng(1)
    block = rng.integers(0, 256, size, dtype=np.uint8)
    paths = []
    for i in range(n):
        p = os.path.join(d, f"s{i:06d}.bin")
        block[:8] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint8)
        block.tofile(p)
        paths.append(p)
    return paths


def warm_cache(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 << 20):
                pass


# --- with PyTorch -------------------------------------------------------------

if torch is not None:

    class ProbedFiles(FileDataset):
        """Batches read with one call, each with its process's probe."""

        def __getitems__(self, indices):
            return self.read_batch(indices), probe()

    def keep(batch):
        return batch


def torch_pass(dl):
    n = 0
    seen = {}
    for batch, p in dl:
        n += batch.shape[0]
        old = seen.get(p[0])
        seen[p[0]] = p if old is None else tuple(max(a, b) for a, b in zip(old, p))
    return n, seen


def run_torch(paths, args, workers, device):
    ds = ProbedFiles(paths, device=device)
    kw = {}
    if workers > 0:
        kw = dict(
            num_workers=workers,
            persistent_workers=True,
            multiprocessing_context="spawn" if device.startswith("cuda") else "fork",
            prefetch_factor=2,
        )
    dl = DataLoader(ds, batch_size=args.batch, shuffle=False, collate_fn=keep, **kw)
    torch_pass(dl)  # warm: starts the workers and their I/O threads
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    samples = 0
    seen = {}
    for _ in range(args.passes):
        n, s = torch_pass(dl)
        samples += n
        for k, v in s.items():
            old = seen.get(k)
            seen[k] = v if old is None else tuple(max(a, b) for a, b in zip(old, v))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if workers == 0:
        seen = {os.getpid(): probe()}
    del dl
    return samples, dt, seen


# --- without PyTorch ----------------------------------------------------------

_samples = None


def _np_init(cap):
    global _samples
    if cap:
        hipfile.limit_io_threads(cap)
    _samples = FileSamples(_np_args["paths"])


def _np_batch(indices):
    size = _samples.nbytes(indices[0])
    out = np.empty((len(indices), size), dtype=np.uint8)
    _samples.read(indices, list(out))
    return len(indices), probe()


_np_args = {}


def run_numpy(paths, args, workers):
    import multiprocessing as mp

    global _samples
    _np_args["paths"] = paths
    batches = [list(range(i, min(i + args.batch, len(paths)))) for i in range(0, len(paths), args.batch)]
    if workers == 0:
        _samples = FileSamples(paths)

        def run(bs):
            return [_np_batch(b) for b in bs]

        pool = None
    else:
        cap = None if os.environ.get("HIPFILE_IO_THREADS") else loader_io_threads(workers)
        pool = mp.get_context("fork").Pool(workers, initializer=_np_init, initargs=(cap,))

        def run(bs):
            return pool.map(_np_batch, bs, chunksize=1)

    run(batches)  # warm
    t0 = time.perf_counter()
    samples = 0
    seen = {}
    for _ in range(args.passes):
        for n, p in run(batches):
            samples += n
            old = seen.get(p[0])
            seen[p[0]] = p if old is None else tuple(max(a, b) for a, b in zip(old, p))
    dt = time.perf_counter() - t0
    if pool is not None:
        pool.close()
        pool.join()
    return samples, dt, seen


# ------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/hf-scaling")
    ap.add_argument("--files", type=int, default=4096)
    ap.add_argument("--size-kb", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=8, help="worker processes of the multi-process rows")
    ap.add_argument("--passes", type=int, default=2, help="timed passes over the files per row")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda (PyTorch only)")
    ap.add_argument("--no-uncapped", action="store_true", help="skip the uncapped row")
    args = ap.parse_args()

    size = args.size_kb << 10
    paths = make_files(args.dir, args.files, size)
    warm_cache(paths)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if torch is not None:
        device = args.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        mode = f"torch {torch.__version__}, {device} tensors"
    else:
        device = "cpu"
        mode = "numpy + multiprocessing (no PyTorch)"

    rows = []
    plan = [(0, False), (args.workers, False)]
    if not args.no_uncapped:
        plan.append((args.workers, True))
    for workers, uncapped in plan:
        saved = os.environ.get("HIPFILE_IO_THREADS")
        if uncapped:
            os.environ["HIPFILE_IO_THREADS"] = str(min(cores, 16))
        try:
            if torch is not None:
                samples, dt, seen = run_torch(paths, args, workers, device)
            else:
                samples, dt, seen = run_numpy(paths, args, workers)
        finally:
            if uncapped:
                if saved is None:
                    os.environ.pop("HIPFILE_IO_THREADS", None)
                else:
                    os.environ["HIPFILE_IO_THREADS"] = saved
        procs = list(seen.values())
        label = f"{workers}" + (" uncapped" if uncapped else "")
        if workers == 0:
            cap = "default"
        elif uncapped:
            cap = str(min(cores, 16))
        else:
            cap = str(min(loader_io_threads(workers), cores, 16))
        rows.append(
            {
                "num_workers": label,
                "io_threads_cap": cap,
                "samples_per_s": samples / dt,
                "gb_per_s": samples * size / dt / 1e9,
                "processes": len(procs),
                "threads_max": max(p[1] for p in procs),
                "threads_sum": sum(p[1] for p in procs),
                "io_workers": [p[2] for p in procs],
                "bounce_mib_sum": sum(p[3] for p in procs) / 2**20,
                "locked_mib_sum": sum(p[4] for p in procs) / 2**20,
            }
        )

    head = (
        f"{args.files} files x {args.size_kb} KiB, batch {args.batch}, {args.passes} timed passes, "
        f"{cores} cores, {mode}, hipfile {hipfile.__version__}"
    )
    lines = [
        head,
        "",
        "| num_workers | I/O threads cap | samples/s | GB/s | reading processes | Threads/process (max) "
        "| Threads (all) | I/O workers per process | bounce MiB (all) | locked MiB (all) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['num_workers']} | {r['io_threads_cap']} | {r['samples_per_s']:.0f} | {r['gb_per_s']:.2f} "
            f"| {r['processes']} | {r['threads_max']} | {r['threads_sum']} "
            f"| {','.join(str(w) for w in sorted(r['io_workers']))} "
            f"| {r['bounce_mib_sum']:.0f} | {r['locked_mib_sum']:.0f} |"
        )
    text = "\n".join(lines)
    print(text)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "dataloader_scaling.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(out, "dataloader_scaling.json"), "w") as f:
            json.dump({"setup": head, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
