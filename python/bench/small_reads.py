#!/usr/bin/env python3
"""Per-call cost of File.read from Python against os.preadv, page-cache hot,
into a NumPy array: the same offset of FILE read again and again at each
block size, best of five timeit repeats for each.

  python3 python/bench/small_reads.py FILE [BLOCK ...]

FILE must hold the largest block (default blocks: 4 KiB, 64 KiB, 256 KiB,
1 MiB). Prints µs per call and os.preadv's time over File.read's (1.0: as
fast as the standard library).
"""

import os
import sys
import timeit

import numpy as np

import hipfile


def main():
    path = sys.argv[1]
    blocks = [int(b) for b in sys.argv[2:]] or [4096, 65536, 262144, 1 << 20]
    fd = os.open(path, os.O_RDONLY)
    f = hipfile.open(path)
    print(f"{path}, kernel {os.uname().release}")
    print("| block | File.read µs | os.preadv µs | preadv / read |")
    print("|---|---|---|---|")
    for bs in blocks:
        a = np.zeros(bs, dtype=np.uint8)
        view = memoryview(a)
        assert f.read(a, size=bs) == bs and os.preadv(fd, [view], 0) == bs
        n = max(2000, (100000 * 4096) // bs)
        ours = min(timeit.repeat(lambda: f.read(a, size=bs), number=n, repeat=5)) / n * 1e6
        theirs = min(timeit.repeat(lambda: os.preadv(fd, [view], 0), number=n, repeat=5)) / n * 1e6
        print(f"| {bs >> 10} KiB | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f} |")
    f.close()
    os.close(fd)


if __name__ == "__main__":
    main()
