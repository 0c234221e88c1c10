# Sourced by scripts/gpu-run.sh on the GPU machine: the measurement list for
# bench/RESULTS.md. Uses B (hipfile-bench), F (4 GiB file), WORK, run, drop.
# Every comparison is within this one run: limits (copy, raw) next to our paths.
W="$WORK/bench-w"
common=(--filename="$F" --size=4G)
"$B" "${common[@]}" --bs=16M --rw=read --ioengine=posix --mem=host --invalidate=0 --loops=1 > "$OUT/create.txt" 2>&1
cat "$F" > /dev/null; cat "$F" > /dev/null   # page-cache hot

echo "| run | dir | bandwidth | IOPS | p50 | p99 | cpu |" >> "$OUT/summary.md"
echo "|---|---|---|---|---|---|---|" >> "$OUT/summary.md"
for rep in 1 2; do
  run "copy-h2d-$rep"  "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=3
  run "sync-hot-1g-$rep" "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
  run "batch-hot-$rep" "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
done
HIPFILE_IO_THREADS=16 run sync-hot-1g-16thr "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
HIPFILE_CHUNK_KB=2048 run sync-hot-1g-2m "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
run sync-hot-64m    "${common[@]}" --bs=64M --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
run posix-hot       "${common[@]}" --bs=16M --rw=read --ioengine=posix --mem=device --invalidate=0 --time_based --runtime=3

# Stream I/O, with the library's debug log of every stream op (diagnosis of a hang seen before).
for j in 1 4; do
  echo "--- async numjobs=$j (debug log tail)" >> "$OUT/async-debug.txt"
  HIPFILE_LOG_LEVEL=debug timeout 25 "$B" "${common[@]}" --bs=64M --numjobs=$j --group_reporting --rw=read \
    --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=2 --output-format=json \
    > "$WORK/json/async$j-hot-64m.json" 2> "$WORK/async$j.err"; echo "exit $?" >> "$OUT/async-debug.txt"
  grep -c "queued on" "$WORK/async$j.err" >> "$OUT/async-debug.txt"
  tail -25 "$WORK/async$j.err" >> "$OUT/async-debug.txt"
  python3 - "$WORK/json/async$j-hot-64m.json" "async$j-hot-64m" <<'PY' | tee -a "$OUT/summary.md"
import json,sys
try:
    j=json.load(open(sys.argv[1])); x=j["jobs"][0]["read"]; print(f"| {sys.argv[2]} | read | {x['bw_bytes']/1e9:.2f} GB/s | | | | |")
except Exception as e:
    print(f"| {sys.argv[2]} | failed: {e} |")
PY
done

drop; run raw-cold   "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1
drop; run sync-cold  "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=1
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1
drop; run posix-cold "${common[@]}" --bs=16M --rw=read --ioengine=posix --mem=device --invalidate=1

wc=(--filename="$W" --size=2G)
run copy-d2h            "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=3
run raw-write           "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
run sync-write-buffered "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
run sync-write-direct   "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1

drop; run raw-rand4k-qd64   "${common[@]}" --bs=4k --iodepth=64 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
drop; run batch-rand4k-qd64 "${common[@]}" --bs=4k --iodepth=64 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4
drop; run batch128-rand4k   "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4

for m in host device; do
  run "posix-lat4k-hot-$m" "${common[@]}" --bs=4k --rw=randread --ioengine=posix --mem=$m --invalidate=0 --time_based --runtime=2
  run "sync-lat4k-hot-$m"  "${common[@]}" --bs=4k --rw=randread --ioengine=hipfile-sync --mem=$m --invalidate=0 --time_based --runtime=2
done
