#!/usr/bin/env bash
# The Python package's tests (part of scripts/test.sh): install ./python into
# a fresh virtual environment the way a user does (`pip install ./python`,
# which builds the extension with maturin), then run pytest with NumPy host
# arrays. PyTorch is not installed here (no CPU-only wheel on PyPI; the CUDA
# one is gigabytes), so tests/test_torch.py and tests/test_gpu.py report
# themselves skipped; the GPU machine runs them (docs/python.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/python-venv.sh
env_dir=target/pyenv
rm -rf "$env_dir"
"$PY" -m venv "$env_dir"
"$env_dir/bin/pip" install -q --disable-pip-version-check pytest numpy
"$env_dir/bin/pip" install -q --disable-pip-version-check ./python
# The extension crate is outside the cargo workspace (it links against
# Python): keep it formatted and lint-clean here.
cargo fmt --manifest-path python/Cargo.toml -- --check
cargo clippy --manifest-path python/Cargo.toml --release -- -D warnings
# From tests/, so the source tree's hipfile/ does not shadow the installed package.
cd python/tests
"../../$env_dir/bin/python" -m pytest -q -rs .
