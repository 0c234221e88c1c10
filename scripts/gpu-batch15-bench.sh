# Sourced by scripts/gpu-run.sh (arg "batch15"): session 15. The copies of a
# worker's pass given to CUDA as one cuMemcpyBatchAsync (HIPFILE_BATCH_COPIES,
# on) against one by one (off), interleaved, on the hot targets, cold and
# random batches, and 4 KiB sync latency.
hot_file
for rep in 1 2 3; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  HIPFILE_BATCH_COPIES=false run "batch-hot-1m-qd128-single-$rep" "${batch_hot[@]}"
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  HIPFILE_BATCH_COPIES=false run "sync-hot-1g-single-$rep" "${sync_hot[@]}"
done
run copy-1m-16jobs-qd8 "${copy[@]}" --bs=1M --iodepth=8 --numjobs=16 --group_reporting
run batch-hot-4m-qd32 "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run async-hot-64m-4jobs "${common[@]}" --bs=64M --iodepth=1 --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
mid=(--rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=2)
run sync-hot-64M "${common[@]}" --bs=64M "${mid[@]}"
HIPFILE_BATCH_COPIES=false run sync-hot-64M-single "${common[@]}" --bs=64M "${mid[@]}"
drop; run raw-cold-huge-1 "${rawc[@]}" --iomem=mmaphuge
drop; run batch-cold-1 "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}"
drop; run raw-cold-huge-2 "${rawc[@]}" --iomem=mmaphuge
drop; run raw-rand4k-qd128-1 "${rawrand[@]}"
drop; run batch-rand4k-qd128 "${rand[@]}"
drop; HIPFILE_BATCH_COPIES=false run batch-rand4k-qd128-single "${rand[@]}"
drop; run raw-rand4k-qd128-2 "${rawrand[@]}"
latency_qd1
