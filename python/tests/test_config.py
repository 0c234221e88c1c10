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
