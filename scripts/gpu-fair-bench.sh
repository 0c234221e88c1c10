# Sourced by scripts/gpu-run.sh (arg "fair"): run 10, after the fair-share rule
# of the work queue (a busy worker takes no more than an even split plus one).
# The hot targets and 4 KiB random reads, interleaved with their limits.
hot_file
sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
batch_hot=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3)
for rep in 1 2; do
  run "copy-h2d-$rep" "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  run "batch-hot-4m-qd32-$rep" "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
done
run copy-h2d-3 "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
for rep in 1 2; do
  drop; run "raw-rand4k-qd128-$rep"   "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
  drop; run "batch-rand4k-qd128-$rep" "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4
done
drop; run raw-cold   "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
drop; run sync-cold  "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=1 --time_based --runtime=4
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1 --time_based --runtime=4
drop; run raw-cold-2 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
