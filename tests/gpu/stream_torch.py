"""hipFileReadAsync on a torch.cuda.Stream while PyTorch synchronises the
device and grows and shrinks its caching allocator (cudaMalloc / cudaFree).

Each round enqueues one to three reads (4 KiB .. 64 MiB, random offsets) on a
torch stream through ctypes, then, while they may still be parked, does one
of: torch.cuda.synchronize(); allocate tensors and free them with
torch.cuda.empty_cache() (cudaMalloc + cudaFree); allocate on another stream;
from the same thread or a second Python thread. Then the stream is
synchronised and every read is checked against the file's bytes.

A watchdog (faulthandler, which also fires while a thread is stuck inside a
C call) dumps every thread's stack and exits with status 1 if a round makes
no progress for 60 s.

Usage: python3 stream_torch.py DIR [ROUNDS] (default 1000); LIBHIPFILE names
the library (default .carry/libhipfile.so).
"""

import ctypes
import faulthandler
import os
import random
import sys
import threading

import torch

MIB = 1 << 20
FILE_BYTES = 256 * MIB
BUF_BYTES = 128 * MIB
WATCHDOG_S = 60


class Descr(ctypes.Structure):
    # hipFileDescr_t: type at 0, handle union at 8, fs_ops at 16.
    _fields_ = [
        ("type", ctypes.c_int),
        ("pad", ctypes.c_int),
        ("fd", ctypes.c_int64),
        ("fs_ops", ctypes.c_void_p),
    ]


class Err(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("hip_drv_err", ctypes.c_int)]


def load(path):
    lib = ctypes.CDLL(path)
    lib.hipFileDriverOpen.restype = Err
    lib.hipFileDriverClose.restype = Err
    lib.hipFileHandleRegister.restype = Err
    lib.hipFileHandleRegister.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Descr)]
    lib.hipFileHandleDeregister.argtypes = [ctypes.c_void_p]
    lib.hipFileReadAsync.restype = Err
    lib.hipFileReadAsync.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_ssize_t),
        ctypes.c_void_p,
    ]
    return lib


class Op:
    """One read's parameters, kept alive (fixed addresses) until its stream is synchronised."""

    def __init__(self, size, foff, boff):
        self.size = ctypes.c_size_t(size)
        self.foff = ctypes.c_int64(foff)
        self.boff = ctypes.c_int64(boff)
        self.bytes = ctypes.c_ssize_t(12345)


def rand_size(rng):
    s = 4096 << rng.randrange(15)
    if rng.randrange(4) == 0:
        s += rng.randrange(4096)
    return min(s, 64 * MIB)


def sync_everything(_rng, _stream):
    torch.cuda.synchronize()


def grow_and_free(rng, _stream):
    # New blocks of a size the cache has not got: cudaMalloc; empty_cache: cudaFree.
    ts = [torch.empty(rng.randrange(1, 64) * MIB + rng.randrange(4096), dtype=torch.uint8, device="cuda")
          for _ in range(rng.randrange(1, 4))]
    for t in ts:
        t.fill_(7)
    del ts
    torch.cuda.empty_cache()


def alloc_on_other_stream(rng, _stream):
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        t = torch.ones(rng.randrange(1, 16) * MIB, dtype=torch.uint8, device="cuda")
        t.add_(1)
    other.synchronize()
    del t


def copy_to_host_same_stream(rng, stream):
    # A pageable device-to-host copy on the parked stream (tensor.cpu()).
    with torch.cuda.stream(stream):
        t = torch.zeros(rng.randrange(1, 8) * 4096, dtype=torch.uint8, device="cuda")
        t.cpu()


CASES = [
    ("torch.cuda.synchronize()", sync_everything),
    ("tensor allocation + empty_cache (cudaMalloc/cudaFree)", grow_and_free),
    ("allocation on another stream", alloc_on_other_stream),
    ("tensor.cpu() on the same stream", copy_to_host_same_stream),
]


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    seed = int(os.environ.get("HIPFILE_TEST_SEED", "12345"))
    rng = random.Random(seed)
    print(f"HIPFILE_TEST_SEED={seed}", flush=True)
    lib = load(os.environ.get("LIBHIPFILE", ".carry/libhipfile.so"))
    path = os.path.join(d, f"hipfile-torch-{os.getpid()}")
    data = torch.randint(0, 256, (FILE_BYTES,), dtype=torch.uint8)
    with open(path, "wb") as f:
        f.write(data.numpy().tobytes())
    fd = os.open(path, os.O_RDONLY)
    torch.cuda.init()
    assert lib.hipFileDriverOpen().err == 0
    fh = ctypes.c_void_p()
    desc = Descr(type=1, pad=0, fd=fd, fs_ops=None)
    e = lib.hipFileHandleRegister(ctypes.byref(fh), ctypes.byref(desc))
    assert e.err == 0, e.err
    buf = torch.zeros(BUF_BYTES, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    print("| case | thread | rounds | completed | hangs | wrong bytes |")
    print("|---|---|---|---|---|---|")
    wrong_total = 0
    for name, call in CASES:
        for other_thread in (False, True):
            wrong = 0
            for r in range(rounds):
                faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
                ops = []
                for i in range(rng.randrange(1, 4)):
                    # Each op in its own 40 MiB of the buffer.
                    size = min(rand_size(rng), 40 * MIB)
                    foff = rng.randrange(FILE_BYTES - size + 1)
                    boff = i * 40 * MIB + rng.randrange(40 * MIB - size + 1)
                    op = Op(size, foff, boff)
                    e = lib.hipFileReadAsync(
                        fh, ctypes.c_void_p(buf.data_ptr()), ctypes.byref(op.size),
                        ctypes.byref(op.foff), ctypes.byref(op.boff), ctypes.byref(op.bytes),
                        ctypes.c_void_p(stream.cuda_stream))
                    assert e.err == 0, f"hipFileReadAsync: {e.err}/{e.hip_drv_err}"
                    ops.append(op)
                if other_thread:
                    t = threading.Thread(target=call, args=(random.Random(rng.random()), stream))
                    t.start()
                    stream.synchronize()
                    t.join()
                else:
                    call(rng, stream)
                stream.synchronize()
                faulthandler.cancel_dump_traceback_later()
                ok = True
                for op in ops:
                    n, f, b = op.size.value, op.foff.value, op.boff.value
                    if op.bytes.value != n:
                        ok = False
                        print(f"  {name}: round {r}: bytes {op.bytes.value}, want {n}")
                        continue
                    got = buf[b:b + n].cpu()
                    if not torch.equal(got, data[f:f + n]):
                        ok = False
                        print(f"  {name}: round {r}: wrong bytes (size {n} foff {f} boff {b})")
                wrong += not ok
            wrong_total += wrong
            print(f"| {name} | {'other' if other_thread else 'same'} | {rounds} | {rounds} | 0 | {wrong} |",
                  flush=True)
    lib.hipFileHandleDeregister(fh)
    assert lib.hipFileDriverClose().err == 0
    os.close(fd)
    os.unlink(path)
    print(f"\n{'PASS' if wrong_total == 0 else 'FAIL'}: {wrong_total} rounds with wrong bytes")
    sys.exit(1 if wrong_total else 0)


if __name__ == "__main__":
    main()
