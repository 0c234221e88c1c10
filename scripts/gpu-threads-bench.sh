# Sourced by scripts/gpu-run.sh (arg "threads"): run 15. 12 worker threads
# (the default, min(cores, 12)) against 16, interleaved, on every read target;
# and what the cold limit is made of: raw at other depths and request sizes,
# the sync path with 1 MiB chunks.
hot_file
sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
batch_hot=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3)
copy=("${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2)
for rep in 1 2; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
  HIPFILE_IO_THREADS=16 run "sync-hot-1g-16thr-$rep" "${sync_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  HIPFILE_IO_THREADS=16 run "batch-hot-1m-qd128-16thr-$rep" "${batch_hot[@]}"
done
run copy-4m-qd4-3 "${copy[@]}" --bs=4M --iodepth=4
rand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4)
rawrand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4)
for rep in 1 2; do
  drop; run "raw-rand4k-qd128-$rep" "${rawrand[@]}"
  drop; run "batch-rand4k-qd128-$rep" "${rand[@]}"
  drop; HIPFILE_IO_THREADS=16 run "batch-rand4k-qd128-16thr-$rep" "${rand[@]}"
done
drop; run raw-rand4k-qd128-3 "${rawrand[@]}"
cold=(--invalidate=1 --time_based --runtime=4)
drop; run raw-cold-1m-qd32 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}"
drop; run sync-cold "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}"
drop; HIPFILE_IO_THREADS=16 run sync-cold-16thr "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}"
drop; HIPFILE_CHUNK_KB=1024 run sync-cold-1m-chunks "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}"
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}"
drop; HIPFILE_IO_THREADS=16 run batch-cold-16thr "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}"
drop; run raw-cold-1m-qd128 "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}"
drop; run raw-cold-4m-qd24 "${common[@]}" --bs=4M --iodepth=24 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}"
drop; run raw-cold-1m-qd8 "${common[@]}" --bs=1M --iodepth=8 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}"
drop; run raw-cold-1m-qd32-2 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}"
uname -r >> "$OUT/notes-kernel.txt"; cat /sys/block/*/queue/max_sectors_kb >> "$OUT/notes-kernel.txt" 2>/dev/null; lsblk -o NAME,TYPE,SIZE,MODEL,TRAN >> "$OUT/notes-kernel.txt" 2>/dev/null; df -h /tmp >> "$OUT/notes-kernel.txt"
