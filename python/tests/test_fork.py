"""Worker processes: a child after fork() gets a fresh, working library for
host memory, whatever the parent did before forking; multiprocessing pools of
2 workers (fork and spawn) read a directory of sample files, as DataLoader
workers do."""

import multiprocessing as mp
import os

import numpy as np
import pytest

import hipfile
from conftest import pattern
from hipfile.data import FileSamples, RecordShards


def in_child(fn):
    """Run fn() in a forked child (30 s watchdog); its exit status, 0 = passed."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import signal

            signal.alarm(30)
            code = 0 if fn() else 1
        except BaseException as e:  # report, never return into pytest in the child
            os.write(2, f"child: {e!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


def read_ok(path, data, offset, size):
    a = np.zeros(size, np.uint8)
    with hipfile.open(path) as f:
        n = f.read(a, file_offset=offset)
    return n == size and np.array_equal(a, data[offset : offset + size])


def test_child_after_the_parent_closed_the_engine_reads_host_memory(datafile):
    p, data = datafile
    assert read_ok(p, data, 0, 1 << 20)
    hipfile.shutdown()
    assert in_child(lambda: read_ok(p, data, 4096, 2 << 20) and read_ok(p, data, 7, 100)) == 0


def test_child_of_a_parent_with_open_files_reads_host_memory(datafile):
    p, data = datafile
    f = hipfile.open(p)
    a = np.zeros(4096, np.uint8)
    assert f.read(a) == 4096

    def child():
        # The parent's File reopens on the child's engine; new files work too.
        b = np.zeros(1 << 20, np.uint8)
        ok1 = f.read(b, file_offset=1 << 20) == 1 << 20 and np.array_equal(b, data[1 << 20 : 2 << 20])
        fut = f.pread(b, file_offset=5)
        ok2 = fut.result() == 1 << 20 and np.array_equal(b, data[5 : 5 + (1 << 20)])
        return ok1 and ok2 and read_ok(p, data, 12345, 300_000) and hipfile.fork_generation() >= 1

    assert in_child(child) == 0
    assert f.read(a, file_offset=8192) == 4096 and np.array_equal(a, data[8192:12288])
    f.close()


def test_grandchild_reads_host_memory(datafile):
    p, data = datafile
    assert read_ok(p, data, 0, 4096)

    def child():
        return read_ok(p, data, 0, 65536) and in_child(lambda: read_ok(p, data, 99, 1 << 20)) == 0

    assert in_child(child) == 0


def make_samples(tdir, n=24):
    files = []
    for i in range(n):
        d = pattern(40_000 + 4096 * (i % 5), i)
        path = os.path.join(tdir, f"sample-{i:03d}.bin")
        d.tofile(path)
        files.append(d)
    return files


def _read_sample(args):
    samples, i = args
    out = np.zeros(samples.nbytes(i), np.uint8)
    samples.read([i], [out])
    return i, out.tobytes()


def _read_batch(args):
    samples, idx = args
    outs = [np.zeros(samples.nbytes(i), np.uint8) for i in idx]
    samples.read(idx, outs)
    return [(i, o.tobytes()) for i, o in zip(idx, outs)]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_two_worker_processes_read_a_directory_of_samples(tdir, method):
    files = make_samples(tdir)
    samples = FileSamples(tdir, suffix=".bin")
    # The parent uses the library (and opens files) before the workers start.
    first = np.zeros(samples.nbytes(0), np.uint8)
    samples.read([0], [first])
    assert np.array_equal(first, files[0])
    batches = [(samples, list(range(b, min(b + 5, len(files))))) for b in range(0, len(files), 5)]
    with mp.get_context(method).Pool(2) as pool:
        got = dict(kv for batch in pool.map(_read_batch, batches) for kv in batch)
        got.update(pool.map(_read_sample, [(samples, i) for i in (3, 17)]))
    assert sorted(got) == list(range(len(files)))
    for i, d in enumerate(files):
        assert got[i] == d.tobytes(), f"sample {i}"
    samples.close()


def test_record_shards_locate_records_across_shards(tdir):
    rec = 1000
    shards = []
    all_bytes = []
    for s, n in enumerate((3, 5, 2)):
        d = pattern(16 + rec * n + 7, s)  # a 16-byte header and a partial tail
        path = os.path.join(tdir, f"shard{s}")
        d.tofile(path)
        shards.append(path)
        all_bytes += [d[16 + k * rec : 16 + (k + 1) * rec] for k in range(n)]
    rs = RecordShards(shards, rec, header_bytes=16)
    assert len(rs) == 10
    outs = [np.zeros(rec, np.uint8) for _ in range(10)]
    rs.read(list(range(9, -1, -1)), outs)
    for k, o in enumerate(outs):
        assert np.array_equal(o, all_bytes[9 - k])
    with pytest.raises(IndexError):
        rs.span(10)
    rs.close()
