# Sourced by scripts/gpu-run.sh (args "final"): latency of small reads after the
# inline device path, and same-run ratios for the batch targets.
hot_file
for m in device host; do
  run "posix-lat4k-hot-$m" "${common[@]}" --bs=4k --rw=randread --ioengine=posix --mem=$m --invalidate=0 --time_based --runtime=2
  run "sync-lat4k-hot-$m"  "${common[@]}" --bs=4k --rw=randread --ioengine=hipfile-sync --mem=$m --invalidate=0 --time_based --runtime=2
done
run copy-h2d "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
run sync-hot-1g "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
run batch-hot "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
drop; run raw-rand4k-qd128   "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
drop; run batch-rand4k-qd128 "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4
drop; run sync-lat4k-cold-dev "${common[@]}" --bs=4k --rw=randread --ioengine=hipfile-sync --direct=1 --mem=device --time_based --runtime=2
drop; run posix-lat4k-cold-dev "${common[@]}" --bs=4k --rw=randread --ioengine=posix --direct=1 --mem=device --time_based --runtime=2
