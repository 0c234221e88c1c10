#!/usr/bin/env bash
# The test command (README "Set up"): everything CI runs, on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
# O_DIRECT and io_uring tests need a real disk-backed directory (tmpfs refuses O_DIRECT).
export HIPFILE_TEST_DIR="${HIPFILE_TEST_DIR:-$PWD/target/test-files}"
mkdir -p "$HIPFILE_TEST_DIR"
cargo test --workspace --release -- --test-threads=2
bash scripts/test-python.sh
bash scripts/test-fio-compat.sh
