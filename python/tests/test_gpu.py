"""Device arrays: PyTorch CUDA tensors, CuPy arrays, DLPack, stream-ordered
reads, batches, and DataLoader workers. Needs a GPU (skipped, visibly,
without one). Run on the GPU machine: see docs/python.md."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hipfile
from conftest import pattern

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or not hipfile.gpu_available():
    pytest.skip("no CUDA device usable by both PyTorch and hipfile", allow_module_level=True)


def test_read_into_a_cuda_tensor(datafile):
    p, data = datafile
    t = torch.zeros(len(data), dtype=torch.uint8, device="cuda")
    with hipfile.open(p) as f:
        assert f.read(t) == len(data)
    assert np.array_equal(t.cpu().numpy(), data)


def test_small_and_unaligned_reads_into_a_cuda_tensor(datafile):
    p, data = datafile
    t = torch.zeros(100_000, dtype=torch.uint8, device="cuda")
    with hipfile.open(p) as f:
        for size, off, boff in [(1, 0, 0), (4095, 1, 3), (65537, 12345, 100), (99_000, 2_000_001, 1000)]:
            assert f.read(t, size=size, file_offset=off, buf_offset=boff) == size
            assert np.array_equal(t[boff : boff + size].cpu().numpy(), data[off : off + size])


def test_write_from_a_cuda_tensor(tdir):
    data = pattern(3 << 20, 4)
    t = torch.from_numpy(data).cuda()
    p = os.path.join(tdir, "gw.bin")
    with hipfile.open(p, "w+") as f:
        assert f.write(t) == len(data)
    assert np.fromfile(p, dtype=np.uint8).tobytes() == data.tobytes()


def test_pread_futures_into_a_cuda_tensor(datafile):
    p, data = datafile
    t = torch.zeros(len(data), dtype=torch.uint8, device="cuda")
    piece = len(data) // 6
    with hipfile.open(p) as f:
        futs = [f.pread(t, size=piece, file_offset=i * piece, buf_offset=i * piece) for i in range(6)]
        assert [x.result() for x in futs] == [piece] * 6
    assert np.array_equal(t.cpu().numpy(), data)


def test_read_batch_into_cuda_tensors(tdir):
    files = [pattern(262144, i) for i in range(8)]
    handles = []
    for i, d in enumerate(files):
        p = os.path.join(tdir, f"b{i}")
        d.tofile(p)
        handles.append(hipfile.open(p))
    out = torch.zeros(8, 262144, dtype=torch.uint8, device="cuda")
    assert hipfile.read_batch([(h, 0, None, out[i]) for i, h in enumerate(handles)]) == [262144] * 8
    for i, d in enumerate(files):
        assert np.array_equal(out[i].cpu().numpy(), d)
    for h in handles:
        h.close()


def test_stream_ordered_read_on_a_torch_stream(datafile):
    p, data = datafile
    s = torch.cuda.Stream()
    t = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    with hipfile.open(p) as f:
        with torch.cuda.stream(s):
            r = f.read_async(t, s, file_offset=4096)
            doubled = t.to(torch.int32) * 2  # queued after the read on the same stream
        assert r.synchronize() == 1 << 20
    assert np.array_equal(t.cpu().numpy(), data[4096 : 4096 + (1 << 20)])
    assert np.array_equal(doubled.cpu().numpy(), data[4096 : 4096 + (1 << 20)].astype(np.int32) * 2)


def test_non_contiguous_cuda_tensor_raises(datafile):
    t = torch.zeros(64, 64, dtype=torch.uint8, device="cuda")[:, ::2]
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(ValueError, match="not C-contiguous"):
            f.read(t)


def test_torch_views_dtypes_and_subclasses_read_their_own_bytes(datafile):
    # A plain contiguous CUDA tensor or nn.Parameter is described by its C
    # accessors; a view starts at its own data_ptr, a float tensor is its
    # nbytes of raw bytes, and another subclass takes
    # __cuda_array_interface__.
    class Mine(torch.Tensor):
        pass

    p, data = datafile
    base = torch.zeros(3 << 20, dtype=torch.uint8, device="cuda")
    view = base[4097 : 4097 + (1 << 20)]
    floats = torch.zeros(512, 256, dtype=torch.float32, device="cuda")
    param = torch.nn.Parameter(torch.zeros(65536, dtype=torch.uint8, device="cuda"), requires_grad=False)
    mine = torch.zeros(8192, dtype=torch.uint8, device="cuda").as_subclass(Mine)
    with hipfile.open(p) as f:
        assert f.read(view, file_offset=3) == 1 << 20
        assert f.read(floats, file_offset=8192) == 512 * 256 * 4
        assert f.read(param, file_offset=100) == 65536
        assert f.read(mine, file_offset=7) == 8192
    host = base.cpu().numpy()
    assert np.array_equal(host[4097 : 4097 + (1 << 20)], data[3 : 3 + (1 << 20)])
    assert not host[:4097].any() and not host[4097 + (1 << 20) :].any()
    assert floats.cpu().numpy().tobytes() == data[8192 : 8192 + 512 * 256 * 4].tobytes()
    assert np.array_equal(param.detach().cpu().numpy(), data[100 : 100 + 65536])
    assert np.array_equal(mine.as_subclass(torch.Tensor).cpu().numpy(), data[7 : 7 + 8192])


def test_a_read_into_a_tensor_that_requires_grad_is_refused_untouched(datafile, tdir):
    p, data = datafile
    t = torch.zeros(4096, dtype=torch.float32, device="cuda", requires_grad=True)
    with hipfile.open(p) as f:
        with pytest.raises(ValueError, match="requires grad.*detach"):
            f.read(t)
        assert not t.detach().cpu().numpy().any()
        # The remedy the message names reads into the same memory.
        assert f.read(t.detach()) == 4096 * 4
    assert t.detach().cpu().numpy().tobytes() == data[: 4096 * 4].tobytes()
    # A write only reads the tensor: allowed, from a parameter too (a
    # checkpoint), and a read into a parameter that requires grad is refused.
    param = torch.nn.Parameter(t.detach().clone())
    out = os.path.join(tdir, "grad.bin")
    with hipfile.open(out, "w") as w:
        assert w.write(t) == 4096 * 4
        assert w.write(param, file_offset=4096 * 4) == 4096 * 4
    assert np.fromfile(out, dtype=np.uint8).tobytes() == 2 * data[: 4096 * 4].tobytes()
    with hipfile.open(p) as f:
        with pytest.raises(ValueError, match="requires grad"):
            f.read(param)


def test_cupy_array_and_dlpack(datafile):
    cp = pytest.importorskip("cupy")
    p, data = datafile
    a = cp.zeros(1 << 20, dtype=cp.uint8)
    with hipfile.open(p) as f:
        assert f.read(a, file_offset=77) == 1 << 20

        class DL:
            def __init__(self, x):
                self.x = x

            def __dlpack__(self, stream=None):
                return self.x.__dlpack__()

            def __dlpack_device__(self):
                return self.x.__dlpack_device__()

        b = cp.zeros(4096, dtype=cp.uint8)
        assert f.read(DL(b), file_offset=5) == 4096
    assert np.array_equal(cp.asnumpy(a), data[77 : 77 + (1 << 20)])
    assert np.array_equal(cp.asnumpy(b), data[5:4101])


def run_child(code):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout, out.stderr


def test_forked_child_of_a_cuda_parent_gets_a_clear_error_for_device_memory(datafile):
    p, _ = datafile
    rc, out, err = run_child(
        f"""
        import os, torch, hipfile, numpy as np
        t = torch.zeros(4096, dtype=torch.uint8, device="cuda")
        with hipfile.open({p!r}) as f:
            f.read(t)
        pid = os.fork()
        if pid == 0:
            code = 0
            with hipfile.open({p!r}) as f:
                a = np.zeros(4096, np.uint8)
                if f.read(a) != 4096:
                    code = 1
                try:
                    f.read(t)
                    code = 2
                except hipfile.HipFileError as e:
                    print("device error:", e)
                    if "spawn" not in str(e):
                        code = 3
            os._exit(code)
        _, st = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(st))
        """
    )
    assert rc == 0, err
    assert "child 0" in out, out + err


def test_dataloader_spawn_workers_read_into_cuda(tdir):
    for i in range(16):
        pattern(65536, i).tofile(os.path.join(tdir, f"s{i:02d}"))
    rc, out, err = run_child(
        f"""
        import torch, numpy as np
        from torch.utils.data import DataLoader
        from hipfile.torch import FileDataset
        if __name__ == "__main__":
            ds = FileDataset({tdir!r})
            dl = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="spawn")
            n = 0
            for b in dl:
                assert b.is_cuda, b.device
                n += b.shape[0]
            print("samples", n)
        """
    )
    assert rc == 0, err
    assert "samples 16" in out
