#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root, with the
# binaries built here carried in .carry/ (scripts/gpu-prepare.sh).
# Usage: scripts/gpu-run.sh [correctness] [faults] [LIST...] ; results go under $OUT.
# A LIST names a measurement list scripts/gpu-LIST-bench.sh (bench, async, final, probe, gather, ...).
set -uo pipefail
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
C=.carry
export LD_LIBRARY_PATH="$PWD/$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ln -sf libhipfile.so "$C/libhipfile.so.0"
what="${*:-correctness bench}"
log() { echo "== $*" | tee -a "$OUT/summary.md"; }
{
  echo "# GPU machine run $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
  uname -r; nproc; free -g | head -2
} > "$OUT/summary.md" 2>&1
WORK=/tmp/hipfile-gpu; mkdir -p "$WORK"

if [[ "$what" == *correctness* ]]; then
  log "build C GPU tests with nvcc"
  for t in gpu_roundtrip gpu_async stream_interleave; do
    nvcc -O2 -I include -I tests/gpu "tests/gpu/$t.c" -o "$WORK/$t" -L "$C" -lhipfile -lcuda \
      -Xlinker -rpath="$PWD/$C" 2>&1 | tail -5
  done
  log "engine unit tests (real CUDA backend test included)"
  # --include-ignored: the real-CUDA round trip is ignored in CI (no GPU there).
  for t in "$C"/engine-unit "$C"/engine-io; do
    [ -x "$t" ] && HIPFILE_TEST_DIR="$WORK" "$t" --include-ignored --test-threads=4 2>&1 | tail -6 | tee -a "$OUT/summary.md"
  done
  log "gpu_roundtrip (sync, device memory, hot/cold, both descriptors)"
  "$WORK/gpu_roundtrip" "$WORK" 2>&1 | tee "$OUT/gpu_roundtrip.txt" | grep -E '^\||passed|FAIL' | tee -a "$OUT/summary.md"
  log "gpu_async (streams, held stream, batch)"
  timeout 120 "$WORK/gpu_async" "$WORK" 2>&1 | tee "$OUT/gpu_async.txt" | grep -E '^\||passed|FAIL' | tee -a "$OUT/summary.md"
  # Stream ops interleaved with the application's CUDA calls (ROUNDS per case
  # and thread, default 1000), and with PyTorch's synchronize and allocator.
  log "stream_interleave (${ROUNDS:-1000} rounds per case)"
  timeout 560 "$WORK/stream_interleave" "$WORK" "${ROUNDS:-1000}" > "$OUT/stream_interleave.txt" 2>&1
  echo "stream_interleave: exit $?" | tee -a "$OUT/summary.md"
  grep -E '^\||passed|FAIL|HANG|wrong' "$OUT/stream_interleave.txt" | tee -a "$OUT/summary.md"
  log "stream_torch (${ROUNDS:-1000} rounds per case)"
  LIBHIPFILE="$C/libhipfile.so" timeout 560 python3 tests/gpu/stream_torch.py "$WORK" "${ROUNDS:-1000}" > "$OUT/stream_torch.txt" 2>&1
  echo "stream_torch: exit $?" | tee -a "$OUT/summary.md"
  grep -E '^\||PASS|FAIL|round|Thread|File' "$OUT/stream_torch.txt" | head -60 | tee -a "$OUT/summary.md"
fi

if [[ "$what" == *faults* ]]; then
  # Issue 5's device-memory variants: the seeded ring faults and injected copy
  # failures of the CI tests, on CUDA device memory and CUDA streams.
  log "fault injection on the real GPU (HIPFILE_TEST_GPU=cuda)"
  for t in engine-faults ffi-async-faults; do
    HIPFILE_TEST_GPU=cuda HIPFILE_TEST_DIR="$WORK" HIPFILE_FAULT_SEEDS="${FAULT_SEEDS:-20}" \
      timeout 300 "$C/$t" --nocapture --test-threads=1 > "$OUT/$t.txt" 2>&1
    echo "$t: exit $?" | tee -a "$OUT/summary.md"
    grep -E "fault injection|test result|panicked|FAILED" "$OUT/$t.txt" | tee -a "$OUT/summary.md"
  done
fi

list_file() { if [ "$1" = bench ]; then echo scripts/gpu-bench.sh; else echo "scripts/gpu-$1-bench.sh"; fi; }
lists=()
for w in $what; do [ -f "$(list_file "$w")" ] && lists+=("$w"); done
if [ "${#lists[@]}" -gt 0 ] && [ -x "$C/hipfile-bench" ]; then
  B="$C/hipfile-bench"
  F="$WORK/bench-4g"
  drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
  run() { # name, args...
    local name=$1; shift
    echo "--- $name: hipfile-bench $*" >> "$OUT/bench.txt"
    mkdir -p "$WORK/json"
    # A bounded run: a hang costs 60 s of the lease, not all of it.
    timeout 60 "$B" "$@" --output-format=json > "$WORK/json/$name.json" 2>>"$OUT/bench.txt" \
      || echo "$name: exit $?" >> "$OUT/bench.txt"
    python3 - "$WORK/json/$name.json" "$name" <<'PY' | tee -a "$OUT/summary.md"
import json,sys
try:
    j=json.load(open(sys.argv[1])); job=j["jobs"][0]
except Exception as e:
    print(f"| {sys.argv[2]} | failed: {e} |"); sys.exit(0)
for d in ("read","write"):
    x=job[d]
    if x["io_bytes"]:
        print(f"| {sys.argv[2]} | {d} | {x['bw_bytes']/1e9:.2f} GB/s | {x['iops']:.0f} IOPS | p50 {x['clat_ns']['percentile'].get('50.000000',0)/1e3:.1f} us | p99 {x['clat_ns']['percentile'].get('99.000000',0)/1e3:.1f} us | usr {job['usr_cpu']:.1f}% sys {job['sys_cpu']:.1f}% |")
PY
  }
  # Shared start of the measurement lists: the 4 GiB file, page-cache hot, and the table header.
  common=(--filename="$F" --size=4G)
  # The shapes the target lists share (a list may redefine any of them).
  copy=("${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2)
  sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
  batch_hot=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3)
  cold=(--invalidate=1 --time_based --runtime=4)
  rawc=("${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}")
  rand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4)
  rawrand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4)
  hot_file() {
    [ -f "$F" ] || "$B" "${common[@]}" --bs=16M --rw=read --ioengine=posix --mem=host --invalidate=0 --loops=1 > "$OUT/create.txt" 2>&1
    cat "$F" > /dev/null; cat "$F" > /dev/null
    echo "| run | dir | bandwidth | IOPS | p50 | p99 | cpu |" >> "$OUT/summary.md"
    echo "|---|---|---|---|---|---|---|" >> "$OUT/summary.md"
  }
  # Blocks several lists share: target 5's 4 KiB cold sync reads against posix,
  # and writes from device memory against the D2H link and the raw disk
  # (N rounds of raw, raw on huge pages, buffered and O_DIRECT sync writes).
  latency_qd1() {
    drop; run sync-rand4k-qd1 "${common[@]}" --bs=4k --iodepth=1 --rw=randread --ioengine=hipfile-sync --direct=1 --mem=device --time_based --runtime=3
    drop; run posix-rand4k-qd1 "${common[@]}" --bs=4k --iodepth=1 --rw=randread --ioengine=posix --direct=1 --mem=device --time_based --runtime=3
  }
  # Target 2: two rounds of raw O_DIRECT on huge-page buffers (and plain
  # buffers with arg "plain"), sync and batch cold reads, then a third raw.
  cold_rounds() {
    for rep in 1 2; do
      [ "${1:-}" = plain ] && { drop; run "raw-cold-$rep" "${rawc[@]}"; }
      drop; run "raw-cold-huge-$rep" "${rawc[@]}" --iomem=mmaphuge
      drop; run "sync-cold-$rep" "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}"
      drop; run "batch-cold-$rep" "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}"
    done
    drop; run raw-cold-huge-3 "${rawc[@]}" --iomem=mmaphuge
  }
  # Target 4: 4 KiB random reads, raw and batch interleaved, raw on both ends.
  random_rounds() {
    for rep in 1 2; do
      drop; run "raw-rand4k-qd128-$rep" "${rawrand[@]}"
      drop; run "batch-rand4k-qd128-$rep" "${rand[@]}"
    done
    drop; run raw-rand4k-qd128-3 "${rawrand[@]}"
  }
  write_rounds() {
    local wc=(--filename="$WORK/write-2g" --size=2G)
    run copy-d2h "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=2
    for rep in $(seq "$1"); do
      run "raw-write-$rep" "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
      run "raw-write-huge-$rep" "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host --iomem=mmaphuge
      run "sync-write-buffered-$rep" "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
      run "sync-write-direct-$rep" "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1
    done
  }
  # The measurement lists live in scripts/gpu-*bench.sh (they use B, F, WORK, common, hot_file, run, drop,
  # latency_qd1, write_rounds, cold_rounds, random_rounds).
  for w in "${lists[@]}"; do . "$(list_file "$w")"; done
  tar -C "$WORK" -czf "$OUT/bench-json.tar.gz" json
fi
log "done"
