# Sourced by scripts/gpu-run.sh (arg "rings"): run 16. Do cold sequential and
# 4 KiB random reads on this virtio disk get slower with more rings
# submitting (worker threads), or with more bytes in flight per worker?
hot_file
cold=(--invalidate=1 --time_based --runtime=4)
batch_cold=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}")
sync_cold=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}")
rawc=("${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}")
drop; run raw-cold-1 "${rawc[@]}"
for t in 2 4 8 12; do drop; HIPFILE_IO_THREADS=$t run "batch-cold-${t}thr" "${batch_cold[@]}"; done
for t in 4 8 12; do drop; HIPFILE_IO_THREADS=$t run "sync-cold-${t}thr" "${sync_cold[@]}"; done
drop; HIPFILE_QUEUE_DEPTH=1 run sync-cold-1slot "${sync_cold[@]}"
drop; run raw-cold-2 "${rawc[@]}"
rand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4)
drop; run raw-rand4k-qd128-1 "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
for t in 2 4 8 12; do drop; HIPFILE_IO_THREADS=$t run "batch-rand4k-qd128-${t}thr" "${rand[@]}"; done
drop; run raw-rand4k-qd128-2 "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
