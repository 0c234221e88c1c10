# Sourced by scripts/gpu-run.sh (arg "ab"): the defaults after session 14
# (huge-page bounce slabs on, split-prone cold host reads bounced) against
# the two open choices, interleaved: 12 against 16 worker threads on every
# read target, and huge pages off. The storage limit is measured both with
# the bench's plain 4 KiB-page buffer and with --iomem=mmaphuge (a 1 MiB
# O_DIRECT read from 4 KiB pages is split on the virtio disk, so the plain
# raw run understates the disk).
hot_file
for rep in 1 2 3; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  HIPFILE_IO_THREADS=16 run "sync-hot-1g-16thr-$rep" "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  HIPFILE_IO_THREADS=16 run "batch-hot-1m-qd128-16thr-$rep" "${batch_hot[@]}"
done
HIPFILE_HUGE_PAGES=false run sync-hot-1g-nohuge "${sync_hot[@]}"
HIPFILE_HUGE_PAGES=false run batch-hot-1m-qd128-nohuge "${batch_hot[@]}"
syncc=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}")
batchc=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}")
for rep in 1 2; do
  drop; run "raw-cold-$rep" "${rawc[@]}"
  drop; run "raw-cold-huge-$rep" "${rawc[@]}" --iomem=mmaphuge
  drop; run "sync-cold-$rep" "${syncc[@]}"
  drop; HIPFILE_IO_THREADS=16 run "sync-cold-16thr-$rep" "${syncc[@]}"
  drop; run "batch-cold-$rep" "${batchc[@]}"
  drop; HIPFILE_IO_THREADS=16 run "batch-cold-16thr-$rep" "${batchc[@]}"
done
drop; HIPFILE_HUGE_PAGES=false run batch-cold-nohuge "${batchc[@]}"
drop; run raw-cold-huge-3 "${rawc[@]}" --iomem=mmaphuge
# Host memory, cold, 1 MiB at QD32: the bounce of split-prone reads (default) against none.
hostc=("${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=hipfile-batch --direct=1 --mem=host "${cold[@]}")
drop; run host-batch-cold "${hostc[@]}"
drop; HIPFILE_HUGE_PAGES=false run host-batch-cold-nohuge "${hostc[@]}"
for rep in 1 2; do
  drop; run "raw-rand4k-qd128-$rep" "${rawrand[@]}"
  drop; run "batch-rand4k-qd128-$rep" "${rand[@]}"
  drop; HIPFILE_IO_THREADS=16 run "batch-rand4k-qd128-16thr-$rep" "${rand[@]}"
done
drop; run raw-rand4k-qd128-3 "${rawrand[@]}"
latency_qd1
write_rounds 2
