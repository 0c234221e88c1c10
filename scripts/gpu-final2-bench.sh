# Sourced by scripts/gpu-run.sh (arg "final2"): the session-14 defaults
# (16 worker threads, huge-page bounce slabs) on every issue-3 target, plus
# the link's own rate for 1 MiB copies on 16 streams (what a batch of 1 MiB
# entries is copied as), for the same-run ratio of the 1 MiB batch.
hot_file
for rep in 1 2 3; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "copy-1m-16jobs-qd8-$rep" "${copy[@]}" --bs=1M --iodepth=8 --numjobs=16 --group_reporting
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
done
run batch-hot-4m-qd32 "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run async-hot-64m-4jobs "${common[@]}" --bs=64M --iodepth=1 --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
run posix-hot-16m "${common[@]}" --bs=16M --rw=read --ioengine=posix --mem=device --invalidate=0 --time_based --runtime=3
cold_rounds plain
random_rounds
latency_qd1
W="$WORK/write-2g"
wc=(--filename="$W" --size=2G)
run copy-d2h "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=2
run raw-write-huge-1 "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host --iomem=mmaphuge
run sync-write-buffered "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
run sync-write-direct "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1
run raw-write-huge-2 "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host --iomem=mmaphuge
