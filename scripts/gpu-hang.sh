#!/usr/bin/env bash
# Diagnose a hang of the stream fault test on the GPU machine: run it under a
# watchdog and, if it stalls, record each thread's CPU time and wait channel before killing it.
# Usage (GPU machine, after scripts/gpu-prepare.sh here): scripts/gpu-hang.sh; results under $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
C=.carry; WORK=/tmp/hipfile-gpu; mkdir -p "$WORK"
export LD_LIBRARY_PATH="$PWD/$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# name, watchdog seconds, env assignments... ; runs ffi-async-faults
watch_run() {
  local name=$1 limit=$2; shift 2
  env HIPFILE_TEST_GPU=cuda HIPFILE_TEST_DIR="$WORK" HIPFILE_LOG_LEVEL=debug "$@" \
    "$C/ffi-async-faults" --nocapture --test-threads=1 > "$OUT/$name.log" 2>&1 &
  local pid=$! t=0
  while kill -0 "$pid" 2>/dev/null && [ "$t" -lt $((limit * 10)) ]; do sleep 0.1; t=$((t + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$name: HUNG after ${limit}s" | tee -a "$OUT/summary.md"
    for task in /proc/"$pid"/task/*; do
      echo "$(cat "$task/comm") $(awk '{print "utime",$14,"stime",$15}' "$task/stat") wchan=$(cat "$task/wchan" 2>/dev/null)"
    done > "$OUT/$name.threads"
    sleep 1
    for task in /proc/"$pid"/task/*; do
      echo "$(cat "$task/comm") $(awk '{print "utime",$14,"stime",$15}' "$task/stat")"
    done >> "$OUT/$name.threads"
    kill -9 "$pid"; wait "$pid" 2>/dev/null
  else
    wait "$pid"; echo "$name: exit $?" | tee -a "$OUT/summary.md"
  fi
  grep -E "fault injection|test result|panicked" "$OUT/$name.log" | tail -3 | tee -a "$OUT/summary.md"
  grep -E "hipfile-io|stream op" "$OUT/$name.log" | tail -60 > "$OUT/$name.tail"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/summary.md"
watch_run all-seeds 60
watch_run all-seeds-conn8 60 CUDA_DEVICE_MAX_CONNECTIONS=8
# Few files come back: one archive of the logs and thread dumps.
(cd "$OUT" && tar czf logs.tgz ./*.log ./*.threads ./*.tail 2>/dev/null; rm -f ./*.log ./*.threads)
cat "$OUT/summary.md"
