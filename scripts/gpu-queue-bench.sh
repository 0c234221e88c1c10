# Sourced by scripts/gpu-run.sh (arg "queue"): the engine after the shared work
# queue and two chunk slots per worker (run 9). Hot targets with repeats and
# the polling variant, then every other target, since dispatch changed for all.
hot_file
W="$WORK/bench-w"
sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
batch_hot=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3)
for rep in 1 2; do
  run "copy-h2d-$rep" "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  HIPFILE_POLL_COPIES=true run "sync-hot-1g-poll-$rep" "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  HIPFILE_POLL_COPIES=true run "batch-hot-1m-qd128-poll-$rep" "${batch_hot[@]}"
done
HIPFILE_QUEUE_DEPTH=4 run sync-hot-1g-slots4 "${sync_hot[@]}"
run sync-hot-64m "${common[@]}" --bs=64M --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
run batch-hot-1m-qd32 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run batch-hot-4m-qd32 "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run async4-hot-64m "${common[@]}" --bs=64M --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
run host-sync-hot-1g "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=host --invalidate=0 --time_based --runtime=3
timeout 60 "$C/hot_probe" "$F" threads=12 bufs=2 > "$OUT/probe.txt" 2>&1
for m in host device; do
  run "posix-lat4k-hot-$m" "${common[@]}" --bs=4k --rw=randread --ioengine=posix --mem=$m --invalidate=0 --time_based --runtime=2
  run "sync-lat4k-hot-$m"  "${common[@]}" --bs=4k --rw=randread --ioengine=hipfile-sync --mem=$m --invalidate=0 --time_based --runtime=2
done
drop; run raw-cold   "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
drop; run sync-cold  "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=1 --time_based --runtime=4
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1 --time_based --runtime=4
drop; run raw-cold-2 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
drop; run raw-rand4k-qd128   "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
drop; run batch-rand4k-qd128 "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4
wc=(--filename="$W" --size=2G)
run copy-d2h            "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=2
run raw-write           "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
run sync-write-buffered "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
run sync-write-direct   "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1
run copy-h2d-3 "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
