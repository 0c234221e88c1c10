"""The hipfile package with host arrays (NumPy, bytearray, DLPack): what CI runs."""

import asyncio
import errno
import os
import threading

import numpy as np
import pytest

import hipfile
from conftest import pattern


def test_read_fills_a_numpy_array(datafile):
    p, data = datafile
    a = np.zeros(len(data), dtype=np.uint8)
    with hipfile.open(p) as f:
        assert f.read(a) == len(data)
    assert np.array_equal(a, data)


def test_read_honours_size_file_offset_and_buf_offset(datafile):
    p, data = datafile
    a = np.zeros(10000, dtype=np.uint8)
    with hipfile.open(p) as f:
        assert f.read(a, size=5000, file_offset=123457, buf_offset=100) == 5000
    assert np.array_equal(a[100:5100], data[123457:128457])
    assert not a[:100].any() and not a[5100:].any()


def test_read_into_a_typed_array_counts_bytes(datafile):
    p, data = datafile
    a = np.zeros(1024, dtype=np.float32)
    with hipfile.open(p) as f:
        assert f.read(a, file_offset=4096) == 4096
    assert np.array_equal(a.view(np.uint8), data[4096:8192])


def test_write_then_read_back(tdir):
    p = os.path.join(tdir, "w.bin")
    data = pattern(1 << 20, 2)
    with hipfile.open(p, "w+") as f:
        assert f.write(data, file_offset=4096) == len(data)
        assert f.size() == 4096 + len(data)
        back = np.empty_like(data)
        assert f.read(back, file_offset=4096) == len(data)
    assert np.array_equal(back, data)
    with open(p, "rb") as raw:
        raw.seek(4096)
        assert raw.read() == data.tobytes()


def test_short_read_at_end_of_file_returns_the_count(datafile):
    p, data = datafile
    a = np.zeros(8192, dtype=np.uint8)
    with hipfile.open(p) as f:
        assert f.read(a, file_offset=len(data) - 100) == 100
    assert np.array_equal(a[:100], data[-100:])


def test_read_past_end_of_file_raises_eof(datafile):
    p, data = datafile
    with hipfile.open(p) as f:
        with pytest.raises(EOFError, match="past the end"):
            f.read(np.zeros(16, dtype=np.uint8), file_offset=len(data) + 4096)


def test_pread_returns_a_future_with_the_count(datafile):
    p, data = datafile
    a = np.zeros(1 << 20, dtype=np.uint8)
    with hipfile.open(p) as f:
        fut = f.pread(a, file_offset=1 << 20)
        assert fut.result() == 1 << 20
        assert fut.done()
        assert fut.result() == 1 << 20
    assert np.array_equal(a, data[1 << 20 : 2 << 20])


def test_many_preads_in_flight(datafile):
    p, data = datafile
    bufs = [np.zeros(256 << 10, dtype=np.uint8) for _ in range(12)]
    with hipfile.open(p) as f:
        futs = [f.pread(b, file_offset=i * (256 << 10)) for i, b in enumerate(bufs)]
        assert [x.result() for x in futs] == [256 << 10] * 12
    for i, b in enumerate(bufs):
        assert np.array_equal(b, data[i * (256 << 10) : (i + 1) * (256 << 10)])


def test_pread_past_end_raises_from_result(datafile):
    p, data = datafile
    with hipfile.open(p) as f:
        fut = f.pread(np.zeros(64, dtype=np.uint8), file_offset=len(data) + 1)
        with pytest.raises(EOFError):
            fut.result()


def test_pwrite_future_then_read(tdir):
    p = os.path.join(tdir, "pw.bin")
    data = pattern(700_000, 3)
    with hipfile.open(p, "w+") as f:
        assert f.pwrite(data).result() == len(data)
        back = np.zeros_like(data)
        assert f.read(back) == len(data)
    assert np.array_equal(back, data)


def test_a_future_can_be_awaited_from_asyncio(datafile):
    p, data = datafile
    a = np.zeros(300_000, dtype=np.uint8)

    async def main(f):
        return await f.pread(a, file_offset=5)

    with hipfile.open(p) as f:
        assert asyncio.run(main(f)) == 300_000
    assert np.array_equal(a, data[5:300_005])


def test_an_awaited_read_past_end_raises_in_the_task(datafile):
    p, data = datafile

    async def main(f):
        return await f.pread(np.zeros(8, dtype=np.uint8), file_offset=len(data) * 2)

    with hipfile.open(p) as f:
        with pytest.raises(EOFError):
            asyncio.run(main(f))


def test_done_callback_runs_once_with_the_future(datafile):
    p, _ = datafile
    seen = []
    ev = threading.Event()

    def cb(fut):
        seen.append(fut.result())
        ev.set()

    with hipfile.open(p) as f:
        fut = f.pread(np.zeros(2 << 20, dtype=np.uint8))
        fut.add_done_callback(cb)
        assert ev.wait(60)
        fut.result()
    assert seen == [2 << 20]


def test_dropping_a_pending_future_keeps_the_destination_safe(datafile):
    p, data = datafile
    with hipfile.open(p) as f:
        for i in range(8):
            f.pread(np.zeros(1 << 20, dtype=np.uint8), file_offset=i * 4096)
        a = np.zeros(4096, dtype=np.uint8)
        assert f.read(a) == 4096
    assert np.array_equal(a, data[:4096])


def test_read_batch_over_several_files(tdir):
    files = []
    for i in range(5):
        d = pattern(100_000 + 4096 * i, i)
        p = os.path.join(tdir, f"s{i}.bin")
        d.tofile(p)
        files.append((p, d))
    handles = [hipfile.open(p) for p, _ in files]
    dests = [np.zeros(len(d), dtype=np.uint8) for _, d in files]
    counts = hipfile.read_batch([(h, 0, None, dst) for h, dst in zip(handles, dests)])
    assert counts == [len(d) for _, d in files]
    for (_, d), dst in zip(files, dests):
        assert np.array_equal(dst, d)
    for h in handles:
        h.close()


def test_read_batch_into_one_array_with_dest_offsets(datafile):
    p, data = datafile
    out = np.zeros(4 * 4096, dtype=np.uint8)
    with hipfile.open(p) as f:
        items = [(f, k * 65536, 4096, out, k * 4096) for k in range(4)]
        assert hipfile.read_batch(items) == [4096] * 4
    for k in range(4):
        assert np.array_equal(out[k * 4096 : (k + 1) * 4096], data[k * 65536 : k * 65536 + 4096])


class CountingDLPack:
    """A DLPack-only destination that counts how often its memory is asked
    for (the Python-level call a PyTorch tensor's __cuda_array_interface__
    property makes on every access)."""

    def __init__(self, arr):
        self.arr = arr
        self.asked = 0

    def __dlpack__(self, stream=None):
        self.asked += 1
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_read_batch_asks_a_shared_destination_for_its_memory_once(datafile):
    p, data = datafile
    out = CountingDLPack(np.zeros(8 * 4096, dtype=np.uint8))
    with hipfile.open(p) as f:
        items = [(f, k * 8192, 4096, out, k * 4096) for k in range(8)]
        assert hipfile.read_batch(items) == [4096] * 8
    assert out.asked == 1
    for k in range(8):
        assert np.array_equal(out.arr[k * 4096 : (k + 1) * 4096], data[k * 8192 : k * 8192 + 4096])


def test_read_batch_keeps_distinct_destinations_apart(datafile):
    p, data = datafile
    a, b = CountingDLPack(np.zeros(4096, np.uint8)), CountingDLPack(np.zeros(4096, np.uint8))
    # Items of one batch run side by side (in no set order), so their
    # destination ranges here do not overlap: a[:16], b, a[16:32].
    with hipfile.open(p) as f:
        assert hipfile.read_batch([(f, 0, 16, a), (f, 4096, None, b), (f, 8192, 16, a, 16)]) == [16, 4096, 16]
    assert (a.asked, b.asked) == (1, 1)
    assert np.array_equal(a.arr[:16], data[:16]) and np.array_equal(a.arr[16:32], data[8192:8208])
    assert not a.arr[32:].any()
    assert np.array_equal(b.arr, data[4096:8192])


def test_read_batch_item_past_end_raises_naming_the_item(datafile):
    p, data = datafile
    with hipfile.open(p) as f:
        with pytest.raises(EOFError, match="item 1"):
            hipfile.read_batch([(f, 0, 16, np.zeros(16, np.uint8)), (f, len(data), 16, np.zeros(16, np.uint8))])


def test_read_batch_bad_item_names_the_item_and_starts_nothing(datafile):
    p, _ = datafile
    good = np.zeros(16, np.uint8)
    with hipfile.open(p) as f:
        with pytest.raises(ValueError, match="item 1"):
            hipfile.read_batch([(f, 0, 16, good), (f, 0, 32, np.zeros(16, np.uint8))])
        with pytest.raises(TypeError, match="item 0"):
            hipfile.read_batch([("not a file", 0, 16, good)])
        with pytest.raises(TypeError):
            hipfile.read_batch([(f, 0)])
    assert not good.any()


def test_context_manager_closes_the_file(datafile):
    p, _ = datafile
    with hipfile.open(p) as f:
        assert not f.closed
    assert f.closed
    f.close()


@pytest.mark.parametrize(
    "op",
    [
        lambda f, a: f.read(a),
        lambda f, a: f.write(a),
        lambda f, a: f.pread(a),
        lambda f, a: f.pwrite(a),
        lambda f, a: hipfile.read_batch([(f, 0, 4, a)]),
        lambda f, a: f.size(),
        lambda f, a: f.fileno(),
    ],
)
def test_closed_file_raises_value_error(datafile, op):
    p, _ = datafile
    f = hipfile.open(p, "r+")
    f.close()
    with pytest.raises(ValueError, match="closed file"):
        op(f, np.zeros(4, np.uint8))


def test_missing_file_raises_hipfile_error_with_errno(tdir):
    with pytest.raises(hipfile.HipFileError) as e:
        hipfile.open(os.path.join(tdir, "nope"))
    assert isinstance(e.value, OSError)
    assert e.value.errno == errno.ENOENT
    assert e.value.code is None


def test_directory_raises_invalid_file_type_code(tdir):
    fd = os.open(tdir, os.O_RDONLY)
    try:
        with pytest.raises(hipfile.HipFileError) as e:
            hipfile.open(fd)
        assert e.value.code == 5018
        assert "5018" in str(e.value)
    finally:
        os.close(fd)


def test_write_to_a_read_only_file_raises_ebadf(datafile):
    p, _ = datafile
    with hipfile.open(p, "r") as f:
        with pytest.raises(hipfile.HipFileError) as e:
            f.write(np.zeros(16, np.uint8))
    assert e.value.errno == errno.EBADF


def test_open_by_descriptor_duplicates_it(datafile):
    p, data = datafile
    fd = os.open(p, os.O_RDONLY)
    with hipfile.open(fd) as f:
        a = np.zeros(100, np.uint8)
        assert f.read(a, file_offset=7) == 100
    os.fstat(fd)  # still open: the File had its own copy
    os.close(fd)
    assert np.array_equal(a, data[7:107])


def test_open_takes_str_bytes_and_pathlike_names(tdir):
    import pathlib

    # A name that is not UTF-8: os.fsdecode maps the byte to a surrogate,
    # which the library must turn back into the same byte.
    raw = os.path.join(os.fsencode(tdir), b"\xff-name.bin")
    pattern(4096, 3).tofile(raw)
    for name in (os.fsdecode(raw), raw, pathlib.Path(os.fsdecode(raw))):
        a = np.zeros(4096, np.uint8)
        with hipfile.open(name) as f:
            assert f.read(a) == 4096
        assert np.array_equal(a, pattern(4096, 3)), name
    os.unlink(raw)


def test_bad_mode_raises_value_error(datafile):
    with pytest.raises(ValueError, match="mode"):
        hipfile.open(datafile[0], "a")


def test_negative_offsets_raise_value_error(datafile):
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(ValueError):
            f.read(np.zeros(4, np.uint8), file_offset=-1)
        with pytest.raises(ValueError):
            f.read(np.zeros(4, np.uint8), buf_offset=-1)


def test_size_larger_than_the_buffer_raises_value_error(datafile):
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(ValueError, match="does not fit"):
            f.read(np.zeros(4, np.uint8), size=8)


def test_non_contiguous_array_raises_value_error(datafile):
    a = np.zeros((64, 64), np.uint8)[:, ::2]
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(ValueError, match="not C-contiguous"):
            f.read(a)
        with pytest.raises(ValueError, match="not C-contiguous"):
            f.pread(a)


def test_read_only_destination_raises_value_error(datafile):
    a = np.zeros(64, np.uint8)
    a.flags.writeable = False
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(ValueError, match="read-only"):
            f.read(a)
        with pytest.raises(ValueError, match="read-only"):
            f.read(b"immutable bytes")


def test_read_only_array_is_a_valid_write_source(tdir):
    a = pattern(4096, 5)
    a.flags.writeable = False
    with hipfile.open(os.path.join(tdir, "ro-src.bin"), "w+") as f:
        assert f.write(a) == 4096
        assert f.write(b"bytes too", file_offset=4096) == 9


def test_object_dtype_raises_type_error(datafile):
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(TypeError, match="numeric dtype"):
            f.read(np.empty(4, dtype=object))


def test_an_object_without_memory_raises_type_error(datafile):
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(TypeError, match="neither"):
            f.read([0] * 16)


def test_bytearray_and_memoryview_destinations(datafile):
    p, data = datafile
    b = bytearray(1000)
    with hipfile.open(p) as f:
        assert f.read(b, file_offset=10) == 1000
        m = memoryview(b)[500:]
        assert f.read(m) == 500
    assert bytes(b[:500]) == data[10:510].tobytes()
    assert bytes(b[500:]) == data[:500].tobytes()


class DLPackOnly:
    """Exposes memory through DLPack only (as JAX or a CPU torch tensor does)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_dlpack_destination(datafile):
    p, data = datafile
    a = np.zeros(5000, dtype=np.uint8)
    with hipfile.open(p) as f:
        assert f.read(DLPackOnly(a), file_offset=99) == 5000
    assert np.array_equal(a, data[99:5099])


def test_dlpack_non_contiguous_raises_value_error(datafile):
    a = np.zeros((32, 32), dtype=np.uint8)[:, ::2]
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(ValueError, match="not C-contiguous"):
            f.read(DLPackOnly(a))


class FakeDeviceArray:
    """A __cuda_array_interface__ object (its pointer is never dereferenced
    here: without a GPU runtime the library refuses device memory first)."""

    def __init__(self, readonly=False):
        self.__cuda_array_interface__ = {
            "data": (0x7F0000000000, readonly),
            "shape": (1024,),
            "typestr": "|u1",
            "strides": None,
            "version": 3,
        }


class HostArrayWithInterface(np.ndarray):
    """A NumPy array (buffer protocol) whose __cuda_array_interface__ would
    name other memory, and counts the times it is asked."""

    asked = 0

    @property
    def __cuda_array_interface__(self):
        type(self).asked += 1
        return FakeDeviceArray().__cuda_array_interface__


def test_a_buffer_protocol_array_is_read_as_host_memory_without_asking_for_more(datafile):
    # The buffer protocol is asked first: a host array costs no attribute
    # lookups, and one that also carries the interface is still its own bytes.
    p, data = datafile
    a = np.zeros(4096, np.uint8).view(HostArrayWithInterface)
    with hipfile.open(p) as f:
        assert f.read(a, file_offset=4096) == 4096
        assert f.pread(a, file_offset=8192).result() == 4096
    assert HostArrayWithInterface.asked == 0
    assert np.array_equal(np.asarray(a), data[8192 : 8192 + 4096])


@pytest.mark.skipif(hipfile.gpu_available(), reason="checks the no-GPU error")
def test_device_array_without_a_gpu_raises_hipfile_error(datafile):
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(hipfile.HipFileError) as e:
            f.read(FakeDeviceArray())
    assert e.value.code == 5029


def test_read_only_device_array_destination_raises_value_error(datafile):
    with hipfile.open(datafile[0]) as f:
        with pytest.raises(ValueError, match="read-only"):
            f.read(FakeDeviceArray(readonly=True))


def test_stream_read_without_gpu_is_synchronous(datafile):
    p, data = datafile
    if hipfile.gpu_available():
        pytest.skip("covered by test_gpu.py on a GPU machine")
    a = np.zeros(4096, np.uint8)
    with hipfile.open(p) as f:
        r = f.read_async(a, 0, file_offset=8192)
        assert r.synchronize() == 4096
        assert r.bytes_read == 4096
    assert np.array_equal(a, data[8192:12288])


def test_configure_after_start_raises_runtime_error(datafile):
    with hipfile.open(datafile[0]):
        pass
    with pytest.raises(RuntimeError, match="before the first I/O"):
        hipfile.configure(io_threads=2)


def test_configure_rejects_unknown_names():
    with pytest.raises(TypeError, match="unknown setting"):
        hipfile.configure(io_thread=2)


def test_settings_report_the_engine(datafile):
    s = hipfile.settings()
    assert s["io_threads"] >= 1 and s["chunk_kb"] > 0
    assert hipfile.runtime() in ("none", "cuda", "hip")


def test_help_documents_the_public_names():
    for name in hipfile.__all__:
        obj = getattr(hipfile, name)
        if callable(obj):
            assert obj.__doc__, name
    for meth in ("read", "write", "pread", "pwrite", "read_async", "close"):
        assert getattr(hipfile.File, meth).__doc__, meth


def test_read_file_opens_reads_and_closes(datafile):
    p, data = datafile
    a = np.zeros(8192, np.uint8)
    assert hipfile.read_file(p, a, size=4096, file_offset=12345, buf_offset=4096) == 4096
    assert np.array_equal(a[4096:], data[12345 : 12345 + 4096])
    assert not a[:4096].any()
    # bytes and PathLike paths; the default size is the rest of the buffer.
    b = np.zeros(65536, np.uint8)
    assert hipfile.read_file(os.fsencode(p), b) == 65536
    assert np.array_equal(b, data[:65536])
    import pathlib

    c = np.zeros(4096, np.uint8)
    assert hipfile.read_file(pathlib.Path(p), c, file_offset=len(data) - 100) == 100
    assert np.array_equal(c[:100], data[-100:])
    # The descriptors are closed: none is left open on the file.
    fds = os.listdir("/proc/self/fd")
    for _ in range(200):
        hipfile.read_file(p, c)
    assert len(os.listdir("/proc/self/fd")) <= len(fds)


def test_read_file_errors_name_the_file(datafile, tdir):
    p, data = datafile
    a = np.zeros(4096, np.uint8)
    missing = os.path.join(tdir, "missing.bin")
    with pytest.raises(hipfile.HipFileError) as e:
        hipfile.read_file(missing, a)
    assert e.value.errno == errno.ENOENT and "missing.bin" in str(e.value)
    with pytest.raises(EOFError, match="data.bin"):
        hipfile.read_file(p, a, file_offset=len(data))
    with pytest.raises(ValueError):
        hipfile.read_file(p, a, file_offset=-1)
    with pytest.raises(ValueError):
        hipfile.read_file(p, a, size=8192)
    with pytest.raises(ValueError, match="read-only"):
        hipfile.read_file(p, bytes(4096))


def test_read_file_from_many_threads(tdir):
    paths = []
    for i in range(64):
        p = os.path.join(tdir, f"s{i}")
        pattern(65536, i).tofile(p)
        paths.append(p)
    out = np.zeros((8, 65536), np.uint8)
    bad = []

    def work(t):
        for i in range(t, 64, 8):
            n = hipfile.read_file(paths[i], out[t])
            if n != 65536 or not np.array_equal(out[t], pattern(65536, i)):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert bad == []
