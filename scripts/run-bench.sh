#!/usr/bin/env bash
# The main job (README "Set up"): build hipfile-bench, lay out a 1 GiB data
# file, read it with hipFileRead in 16 MiB requests into GPU memory (host
# memory when no GPU is present), print GB/s and verify every byte.
#
#   bash scripts/run-bench.sh [hipfile-bench options...]
#
# HIPFILE_BENCH_CACHE picks the case measured, and the run keeps to it every
# time: hot (default: the file is read into the page cache first) or cold
# (its pages are dropped first, so the data comes from storage; on tmpfs
# they cannot be). The report's last line states the case measured: engine,
# memory, request size, bytes, and the page-cache state found when it
# started. Notes go to stderr, the report to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hipfile-bench >&2
FILE="${HIPFILE_BENCH_FILE:-$PWD/target/bench-1g.dat}"
SIZE="${HIPFILE_BENCH_SIZE:-1G}"
case "${HIPFILE_BENCH_CACHE:-hot}" in
  hot) cache=(--pre_read=1 --invalidate=0) ;;
  cold) cache=(--invalidate=1) ;;
  *) echo "run-bench.sh: HIPFILE_BENCH_CACHE must be hot or cold" >&2; exit 2 ;;
esac
# hipfile-bench creates the file with a known pattern when it is missing, and
# picks device memory when a GPU runtime with a device is present.
exec ./target/release/hipfile-bench --name=main --filename="$FILE" --size="$SIZE" --bs=16M \
  --rw=read --ioengine=hipfile-sync --verify=1 "${cache[@]}" "$@"
