# Sourced by scripts/gpu-run.sh (arg "confirm"): every issue-3 target with
# the defaults after session 14 (16 worker threads, huge-page bounce slabs,
# split-prone cold host reads bounced through them), interleaved with the
# two choices still in question: huge pages off (hot and random reads), and
# the storage-worker limit off (HIPFILE_COLD_IO_THREADS=0: no split-time
# cachestat) for hot 1 MiB batches. The storage limit is measured with the
# bench's plain buffer and with --iomem=mmaphuge.
hot_file
copy=("${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2)
sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
batch_hot=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3)
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
cold=(--invalidate=1 --time_based --runtime=4)
rawc=("${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}")
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
rand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4)
rawrand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4)
for rep in 1 2; do
  drop; run "raw-rand4k-qd128-$rep" "${rawrand[@]}"
  drop; run "batch-rand4k-qd128-$rep" "${rand[@]}"
  drop; HIPFILE_HUGE_PAGES=false run "batch-rand4k-qd128-nohuge-$rep" "${rand[@]}"
done
drop; run raw-rand4k-qd128-3 "${rawrand[@]}"
drop; run sync-rand4k-qd1 "${common[@]}" --bs=4k --iodepth=1 --rw=randread --ioengine=hipfile-sync --direct=1 --mem=device --time_based --runtime=3
drop; run posix-rand4k-qd1 "${common[@]}" --bs=4k --iodepth=1 --rw=randread --ioengine=posix --direct=1 --mem=device --time_based --runtime=3
W="$WORK/write-2g"
wc=(--filename="$W" --size=2G)
run copy-d2h "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=2
for rep in 1 2; do
  run "raw-write-$rep" "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
  run "raw-write-huge-$rep" "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host --iomem=mmaphuge
  run "sync-write-buffered-$rep" "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
  run "sync-write-direct-$rep" "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1
done
