import os
import uuid

import numpy as np
import pytest


@pytest.fixture
def tdir(tmp_path):
    """A directory for test files: $HIPFILE_TEST_DIR (disk-backed, so O_DIRECT
    works) when set, else pytest's tmp_path."""
    base = os.environ.get("HIPFILE_TEST_DIR")
    if not base:
        yield tmp_path
        return
    d = os.path.join(base, "py-" + uuid.uuid4().hex[:12])
    os.makedirs(d)
    yield d
    for n in os.listdir(d):
        os.unlink(os.path.join(d, n))
    os.rmdir(d)


def pattern(n, salt=0):
    return ((np.arange(n, dtype=np.uint64) * 2654435761 + salt) >> 8).astype(np.uint8)


@pytest.fixture
def datafile(tdir):
    """A 3 MiB file of known bytes: (path, numpy array of its bytes)."""
    data = pattern(3 << 20, 1)
    p = os.path.join(tdir, "data.bin")
    data.tofile(p)
    return p, data
