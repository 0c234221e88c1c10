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
  run "sync-hot-$rep"  "${common[@]}" --bs=512M --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
  run "batch-hot-$rep" "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
done
run posix-hot       "${common[@]}" --bs=16M --rw=read --ioengine=posix --mem=device --invalidate=0 --time_based --runtime=4
run sync-hot-64m    "${common[@]}" --bs=64M --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=4
run async4-hot-64m  "${common[@]}" --bs=64M --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=4
run sync-hot-1m     "${common[@]}" --bs=1M --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3

for rep in 1; do
  drop; run "raw-cold-$rep"   "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1
  drop; run "sync-cold-$rep"  "${common[@]}" --bs=512M --rw=read --ioengine=hipfile-sync --mem=device --invalidate=1
  drop; run "batch-cold-$rep" "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1
done
drop; run posix-cold "${common[@]}" --bs=16M --rw=read --ioengine=posix --mem=device --invalidate=1

wc=(--filename="$W" --size=2G)
run copy-d2h            "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=3
run raw-write           "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
run sync-write-buffered "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
run sync-write-direct   "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1

for qd in 64 128; do
  drop; run "raw-rand4k-qd$qd"   "${common[@]}" --bs=4k --iodepth=$qd --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
  drop; run "batch-rand4k-qd$qd" "${common[@]}" --bs=4k --iodepth=$qd --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4
done

for m in host device; do
  run "posix-lat4k-hot-$m" "${common[@]}" --bs=4k --rw=randread --ioengine=posix --mem=$m --invalidate=0 --time_based --runtime=2
  run "sync-lat4k-hot-$m"  "${common[@]}" --bs=4k --rw=randread --ioengine=hipfile-sync --mem=$m --invalidate=0 --time_based --runtime=3
done
drop; run posix-lat4k-cold-host "${common[@]}" --bs=4k --rw=randread --ioengine=posix --direct=1 --mem=host --time_based --runtime=3
drop; run sync-lat4k-cold-host  "${common[@]}" --bs=4k --rw=randread --ioengine=hipfile-sync --direct=1 --mem=host --time_based --runtime=3
drop; run sync-lat4k-cold-dev   "${common[@]}" --bs=4k --rw=randread --ioengine=hipfile-sync --direct=1 --mem=device --time_based --runtime=3
