"""configure() in a fresh process (each case in a child interpreter, since
settings are read once per process)."""

import subprocess
import sys
import textwrap


def run(code, env=None):
    import os

    e = dict(os.environ)
    e.update(env or {})
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_keyword_settings_take_effect():
    out = run(
        """
        import hipfile
        hipfile.configure(io_threads=3, chunk_kb=1024, read_mode="buffered", log_level="error")
        s = hipfile.settings()
        print(s["io_threads"], s["chunk_kb"], s["read_mode"])
        """
    )
    assert out == "3 1024 buffered"


def test_the_copy_spin_is_a_keyword_and_reported():
    out = run(
        """
        import hipfile
        hipfile.configure(copy_spin_us=250)
        print(hipfile.settings()["copy_spin_us"])
        """
    )
    assert out == "250"
    out = run(
        """
        import hipfile
        print(hipfile.settings()["copy_spin_us"])
        """,
        {"HIPFILE_COPY_SPIN_US": "0"},
    )
    assert out == "0"


def test_environment_applies_where_keywords_are_silent():
    out = run(
        """
        import hipfile
        hipfile.configure(chunk_kb=512)
        s = hipfile.settings()
        print(s["io_threads"], s["chunk_kb"])
        """,
        {"HIPFILE_IO_THREADS": "2", "HIPFILE_CHUNK_KB": "8192"},
    )
    assert out == "2 512"


def test_the_configuration_file_applies_under_keywords_and_environment(tmp_path):
    # As for the C library: keywords over HIPFILE_* over the file.
    conf = tmp_path / "hipfile.json"
    conf.write_text('{ "execution": { "max_io_threads": 5 }, "hipfile": { "chunk_kb": 2048, "read_mode": "buffered" } }')
    out = run(
        """
        import hipfile
        hipfile.configure(read_mode="direct")
        s = hipfile.settings()
        print(s["io_threads"], s["chunk_kb"], s["read_mode"])
        """,
        {"HIPFILE_CONFIG": str(conf), "HIPFILE_CHUNK_KB": "1024"},
    )
    assert out == "5 1024 direct"


def test_a_retired_setting_is_accepted_and_ignored():
    # As its HIPFILE_* variable is: the engine's behaviour is fixed.
    out = run(
        """
        import hipfile
        s = hipfile.configure(poll_copies=True, first_read_alone=False, stream_stages=4)
        print(s["stream_stages"])
        """
    )
    assert out == "4"


def test_an_unknown_setting_is_refused():
    out = run(
        """
        import hipfile
        try:
            hipfile.configure(queue_depht=3)
        except TypeError as e:
            print("refused" if "queue_depht" in str(e) else e)
        """
    )
    assert out == "refused"


def test_limit_io_threads_caps_a_fresh_process():
    out = run(
        """
        import hipfile
        got = hipfile.limit_io_threads(2)
        s = hipfile.settings()
        print(got, s["io_threads"], hipfile.usage()["workers"])
        """
    )
    got, threads, workers = out.split()
    assert got == threads and int(threads) <= 2
    # The engine opens with one worker; more start only as work needs them.
    assert workers == "1"


def test_limit_io_threads_leaves_an_explicit_thread_count_alone():
    out = run(
        """
        import hipfile
        print(hipfile.limit_io_threads(1), hipfile.settings()["io_threads"])
        """,
        {"HIPFILE_IO_THREADS": "3"},
    )
    assert out == "None 3"


def test_limit_io_threads_keeps_the_settings_configure_gave():
    out = run(
        """
        import hipfile
        hipfile.configure(io_threads=3)
        print(hipfile.limit_io_threads(1), hipfile.settings()["io_threads"])
        """
    )
    assert out == "None 3"


def test_limit_io_threads_after_the_first_io_changes_nothing():
    out = run(
        """
        import hipfile
        before = hipfile.settings()["io_threads"]
        print(hipfile.limit_io_threads(1), hipfile.settings()["io_threads"] == before)
        """
    )
    assert out == "None True"


def test_usage_before_the_engine_starts_is_zero_and_starts_nothing():
    out = run(
        """
        import hipfile
        u = hipfile.usage()
        print(u["workers"], u["bounce_bytes"], hipfile.usage()["workers"])
        """
    )
    assert out == "0 0 0"


def test_one_read_at_a_time_holds_one_worker_and_a_burst_grows(tmp_path):
    import os

    base = os.environ.get("HIPFILE_TEST_DIR") or str(tmp_path)
    path = os.path.join(base, f"grow-{os.getpid()}.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(4 << 20))
    try:
        out = run(
            f"""
            import time
            import hipfile, numpy as np
            hipfile.configure(io_threads=4, inline_kb=0, chunk_kb=64)
            a = np.empty(64 << 10, dtype=np.uint8)
            with hipfile.open({path!r}) as f:
                for i in range(32):
                    f.read(a, file_offset=i * a.nbytes)
                one = hipfile.usage()["workers"]
                big = np.empty(4 << 20, dtype=np.uint8)
                f.read(big)
            # The new workers map their memory on their own threads.
            t0 = time.monotonic()
            while hipfile.usage()["workers"] < 4 and time.monotonic() - t0 < 30:
                time.sleep(0.001)
            print(one, hipfile.usage()["workers"], hipfile.settings()["io_threads"])
            """
        )
    finally:
        os.unlink(path)
    assert out == "1 4 4"
