# Sourced by scripts/gpu-run.sh (arg "check"): every issue-3 target with the
# defaults as they stand after session 13 (storage reads on 4 workers, queue
# wake-ups per eligibility, host reads inline up to 64 KiB with 12 workers),
# which no H200 run has measured yet; plus 16 worker threads, which helped hot
# sync reads in runs 11-15 and hurt cold ones before the storage-worker limit;
# and huge-page bounce slabs (HIPFILE_HUGE_PAGES), which merged cold 1 MiB
# reads into ~3.4 MiB block requests on the 2-core VM's virtio disk.
hot_file
for rep in 1 2; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  HIPFILE_IO_THREADS=16 run "sync-hot-1g-16thr-$rep" "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  HIPFILE_HUGE_PAGES=true run "sync-hot-1g-huge-$rep" "${sync_hot[@]}"
  HIPFILE_HUGE_PAGES=true run "batch-hot-1m-qd128-huge-$rep" "${batch_hot[@]}"
done
run batch-hot-4m-qd32 "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run async-hot-64m-4jobs "${common[@]}" --bs=64M --iodepth=1 --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
for rep in 1 2; do
  drop; run "raw-rand4k-qd128-$rep" "${rawrand[@]}"
  drop; run "batch-rand4k-qd128-$rep" "${rand[@]}"
done
drop; HIPFILE_COLD_IO_THREADS=0 run batch-rand4k-qd128-allworkers "${rand[@]}"
drop; run raw-rand4k-qd128-3 "${rawrand[@]}"
drop; run raw-cold-1 "${rawc[@]}"
drop; run sync-cold "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}"
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}"
drop; HIPFILE_IO_THREADS=16 run sync-cold-16thr "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}"
drop; HIPFILE_HUGE_PAGES=true run sync-cold-huge "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}"
drop; HIPFILE_HUGE_PAGES=true run batch-cold-huge "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}"
drop; HIPFILE_HUGE_PAGES=true run batch-rand4k-qd128-huge "${rand[@]}"
drop; run raw-cold-2 "${rawc[@]}"
drop; run sync-rand4k-qd1 "${common[@]}" --bs=4k --iodepth=1 --rw=randread --ioengine=hipfile-sync --direct=1 --mem=device --time_based --runtime=3
drop; run posix-rand4k-qd1 "${common[@]}" --bs=4k --iodepth=1 --rw=randread --ioengine=posix --direct=1 --mem=device --time_based --runtime=3
W="$WORK/write-2g"
wc=(--filename="$W" --size=2G)
run copy-d2h "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=2
run raw-write-1 "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
run sync-write-buffered "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
run sync-write-direct "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1
run raw-write-2 "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
