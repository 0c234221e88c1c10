"""python/bench/loader_shapes.py: a hot row is read from the page cache
whatever the side under test does to it. hipfile reads the ranges the cache
lacks with O_DIRECT, which leaves them uncached, so a side's own untimed pass
cannot be what makes a file hot."""

import importlib.util
import os

import pytest

from conftest import pattern

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "loader_shapes.py")


@pytest.fixture(scope="module")
def shapes():
    spec = importlib.util.spec_from_file_location("loader_shapes", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class NoDevice:
    def sync(self):
        pass


@pytest.fixture
def evicted(tdir, shapes):
    """An 8 MiB file whose pages were dropped from the page cache."""
    p = os.path.join(tdir, "shape.bin")
    with open(p, "wb") as f:
        f.write(pattern(8 << 20, 5).tobytes())
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(p, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if shapes.cached_fraction([p]) > 0.5:
        pytest.skip("this file system keeps the file's pages (tmpfs?): cannot make a file cold")
    return p


def test_cached_fraction_sees_a_file_read_into_the_page_cache(evicted, shapes):
    with open(evicted, "rb") as f:
        while f.read(1 << 20):
            pass
    assert shapes.cached_fraction([evicted]) == 1.0


def test_hot_measurement_fills_the_page_cache_for_a_side_that_does_not(evicted, shapes):
    runs = []
    out = shapes.measure({"side": lambda: runs.append(1)}, 8 << 20, False, 2, NoDevice(), [evicted])
    _, rates, cached = out["side"]
    assert len(rates) == 2 and len(runs) == 3  # one untimed pass, two timed
    assert cached == [1.0, 1.0]


def test_sides_take_turns_run_by_run(evicted, shapes):
    order = []
    sides = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    out = shapes.measure(sides, 8 << 20, False, 3, NoDevice(), [evicted])
    assert set(out) == {"a", "b"} and all(len(out[s][1]) == 3 for s in out)
    # One untimed pass each, then the timed runs alternating.
    assert order == ["a", "b", "a", "b", "a", "b", "a", "b"]


def test_a_side_that_times_itself_is_taken_at_its_word(evicted, shapes):
    out = shapes.measure({"c": lambda: 0.5}, 1 << 30, False, 2, NoDevice(), [evicted])
    assert out["c"][1] == [pytest.approx(2.147483648), pytest.approx(2.147483648)]


def test_the_threaded_shape_reads_each_file_into_its_threads_slice(tdir, shapes):
    size, threads, files = 64 << 10, 3, 7
    paths = []
    for i in range(files):
        p = os.path.join(tdir, f"t{i}.bin")
        with open(p, "wb") as f:
            f.write(pattern(size, 10 + i).tobytes())
        paths.append(p)
    dev = shapes.HostBuffer(threads * size)
    shapes.py_threads(paths, size, threads, dev)
    # Thread t reads paths[t::threads] in order into its own slice: the
    # slice holds the last of them.
    for t in range(threads):
        last = len(paths[t::threads]) - 1
        want = pattern(size, 10 + t + threads * last)
        assert (dev.array[t * size : (t + 1) * size] == want).all(), f"thread {t}"
