#!/usr/bin/env bash
# The test command (README "Set up"): everything CI runs, on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
# O_DIRECT and io_uring tests need a real disk-backed directory (tmpfs refuses O_DIRECT).
export HIPFILE_TEST_DIR="${HIPFILE_TEST_DIR:-$PWD/target/test-files}"
mkdir -p "$HIPFILE_TEST_DIR"
# NVIDIA's cufile.h and libcufile from PyPI, for the cuFile front's and the passthrough's
# tests (fails loudly when it cannot download them; they are never committed).
bash scripts/fetch-cufile-sdk.sh
cargo test --workspace --release -- --test-threads=2
