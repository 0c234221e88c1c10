# Sourced by scripts/gpu-run.sh (arg "split"): run 12, after the balanced split
# of mid-size sync requests and the timed kernel wait; repeats of the hot targets.
hot_file
sync_hot=(--rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
copy=("${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2)
for rep in 1 2; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "sync-hot-1g-$rep" "${common[@]}" --bs=1G "${sync_hot[@]}"
  run "sync-hot-64m-$rep" "${common[@]}" --bs=64M "${sync_hot[@]}"
  run "sync-hot-16m-$rep" "${common[@]}" --bs=16M "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
  run "copy-1m-qd16-$rep" "${copy[@]}" --bs=1M --iodepth=16
done
run async4-hot-64m "${common[@]}" --bs=64M --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
run copy-4m-qd4-3 "${copy[@]}" --bs=4M --iodepth=4
