#!/usr/bin/env bash
# The main job (README "Set up"): build, generate a 1 GiB file, read it into
# GPU memory with hipfile-bench (host memory when no GPU is present), print
# GB/s and verify every byte.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hipfile-bench
FILE="${HIPFILE_BENCH_FILE:-$PWD/target/bench-1g.dat}"
SIZE="${HIPFILE_BENCH_SIZE:-1G}"
# hipfile-bench creates the file with a known pattern when it is missing, and
# picks device memory when a GPU runtime with a device is present.
./target/release/hipfile-bench --filename="$FILE" --size="$SIZE" --bs=16M --rw=read \
  --ioengine=hipfile-sync --verify=1 --invalidate=0 "$@"
