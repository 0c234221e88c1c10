# Sourced by scripts/gpu-run.sh (arg "confirm"): every issue-3 target with
# the defaults after session 14 (16 worker threads, huge-page bounce slabs,
# split-prone cold host reads bounced through them), interleaved with the
# two choices still in question: huge pages off (hot and random reads), and
# the storage-worker limit off (HIPFILE_COLD_IO_THREADS=0: no split-time
# cachestat) for hot 1 MiB batches. The storage limit is measured with the
# bench's plain buffer and with --iomem=mmaphuge.
hot_file
for rep in 1 2 3; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  HIPFILE_HUGE_PAGES=false run "sync-hot-1g-nohuge-$rep" "${sync_hot[@]}"
  HIPFILE_HUGE_PAGES=false run "batch-hot-1m-qd128-nohuge-$rep" "${batch_hot[@]}"
  HIPFILE_COLD_IO_THREADS=0 run "batch-hot-1m-qd128-nocold-$rep" "${batch_hot[@]}"
done
run batch-hot-4m-qd32 "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run async-hot-64m-4jobs "${common[@]}" --bs=64M --iodepth=1 --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
syncc=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}")
batchc=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}")
hostc=("${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=hipfile-batch --direct=1 --mem=host "${cold[@]}")
for rep in 1 2; do
  drop; run "raw-cold-$rep" "${rawc[@]}"
  drop; run "raw-cold-huge-$rep" "${rawc[@]}" --iomem=mmaphuge
  drop; run "sync-cold-$rep" "${syncc[@]}"
  drop; run "batch-cold-$rep" "${batchc[@]}"
  drop; run "host-batch-cold-$rep" "${hostc[@]}"
  drop; HIPFILE_HUGE_PAGES=false run "host-batch-cold-nohuge-$rep" "${hostc[@]}"
done
drop; HIPFILE_HUGE_PAGES=false run batch-cold-nohuge "${batchc[@]}"
drop; run raw-cold-3 "${rawc[@]}"
for rep in 1 2; do
  drop; run "raw-rand4k-qd128-$rep" "${rawrand[@]}"
  drop; run "batch-rand4k-qd128-$rep" "${rand[@]}"
  drop; HIPFILE_HUGE_PAGES=false run "batch-rand4k-qd128-nohuge-$rep" "${rand[@]}"
done
drop; run raw-rand4k-qd128-3 "${rawrand[@]}"
latency_qd1
write_rounds 2
