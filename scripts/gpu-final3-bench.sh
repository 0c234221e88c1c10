# Sourced by scripts/gpu-run.sh (arg "final3"): session 15's defaults (the
# first read alone, two pieces per worker down to 2 MiB) on every issue-3
# target, as final2 did for session 14; with 1 GiB sync reads without the
# first read alone as the control, and mid-size sync reads (32, 64, 128 MiB)
# against one piece per worker.
hot_file
for rep in 1 2 3; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "copy-1m-16jobs-qd8-$rep" "${copy[@]}" --bs=1M --iodepth=8 --numjobs=16 --group_reporting
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  HIPFILE_FIRST_READ_ALONE=false run "sync-hot-1g-together-$rep" "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
done
mid=(--rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=2)
for rep in 1 2; do
  for bs in 32M 64M 128M; do
    run "sync-hot-$bs-$rep" "${common[@]}" --bs=$bs "${mid[@]}"
    HIPFILE_PIECES_PER_WORKER=1 run "sync-hot-$bs-k1-$rep" "${common[@]}" --bs=$bs "${mid[@]}"
  done
done
run batch-hot-4m-qd32 "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run async-hot-64m-4jobs "${common[@]}" --bs=64M --iodepth=1 --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
run posix-hot-16m "${common[@]}" --bs=16M --rw=read --ioengine=posix --mem=device --invalidate=0 --time_based --runtime=3
cold_rounds
random_rounds
latency_qd1
write_rounds 1
run raw-write-huge-2 --filename="$WORK/write-2g" --size=2G --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host --iomem=mmaphuge
