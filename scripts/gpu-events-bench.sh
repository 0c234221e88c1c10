# Sourced by scripts/gpu-run.sh (arg "events"): run 13. One completion event
# per stream covers every copy a worker queued in a pass. The build before it
# (.carry/hipfile-bench-prev, 68d39f9) runs interleaved on the same cases;
# then chunk-size knobs for hot sync reads, cold, random and write targets.
hot_file
PREV="$C/hipfile-bench-prev"
sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
batch_hot=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3)
copy=("${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2)
prev() { local b=$B; B=$PREV; run "$@"; B=$b; }
for rep in 1 2; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  prev "prev-batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  prev "prev-sync-hot-1g-$rep" "${sync_hot[@]}"
done
run copy-1m-qd16 "${copy[@]}" --bs=1M --iodepth=16
run batch-hot-1m-qd64 "${common[@]}" --bs=1M --iodepth=64 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run batch-hot-4m-qd32 "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run async-hot-64m-4jobs "${common[@]}" --bs=64M --iodepth=1 --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
HIPFILE_CHUNK_KB=8192 run sync-hot-1g-8m "${sync_hot[@]}"
HIPFILE_CHUNK_KB=8192 HIPFILE_IO_THREADS=8 run sync-hot-1g-8m-8thr "${sync_hot[@]}"
HIPFILE_IO_THREADS=16 run sync-hot-1g-16thr "${sync_hot[@]}"
HIPFILE_POLL_COPIES=true run sync-hot-1g-poll "${sync_hot[@]}"
HIPFILE_POLL_COPIES=true run batch-hot-1m-qd128-poll "${batch_hot[@]}"
run copy-4m-qd4-3 "${copy[@]}" --bs=4M --iodepth=4
for rep in 1 2; do
  drop; run "raw-rand4k-qd128-$rep"   "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
  drop; run "batch-rand4k-qd128-$rep" "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4
done
drop; prev prev-batch-rand4k-qd128 "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4
drop; run raw-cold   "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1 --time_based --runtime=4
drop; run sync-cold  "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=1 --time_based --runtime=4
drop; run raw-cold-2 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
W="$WORK/write-2g"
wc=(--filename="$W" --size=2G)
run copy-d2h            "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=2
run raw-write           "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
run sync-write-buffered "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
run sync-write-direct   "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1
