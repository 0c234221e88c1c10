# Sourced by scripts/gpu-run.sh (arg "cold"): run 17. HIPFILE_COLD_IO_THREADS
# (storage-bound read chunks only on the first N workers) against the default
# (all 12) on the cold and random targets, and on hot reads (which it must not
# touch); 1 MiB host-memory sync reads inline (the new default) against the
# workers (HIPFILE_INLINE_KB=64).
hot_file
cold=(--invalidate=1 --time_based --runtime=4)
batch_cold=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device "${cold[@]}")
sync_cold=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device "${cold[@]}")
rawc=("${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host "${cold[@]}")
rand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4)
rawrand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4)
drop; run raw-cold-1 "${rawc[@]}"
for n in 0 2 4 8; do drop; HIPFILE_COLD_IO_THREADS=$n run "batch-cold-cold$n" "${batch_cold[@]}"; done
for n in 0 4 8; do drop; HIPFILE_COLD_IO_THREADS=$n run "sync-cold-cold$n" "${sync_cold[@]}"; done
drop; run raw-cold-2 "${rawc[@]}"
drop; run raw-rand4k-qd128-1 "${rawrand[@]}"
for n in 0 4 8; do drop; HIPFILE_COLD_IO_THREADS=$n run "batch-rand4k-qd128-cold$n" "${rand[@]}"; done
drop; run raw-rand4k-qd128-2 "${rawrand[@]}"
hot_file
run copy-4m-qd4 "${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2 --bs=4M --iodepth=4
for n in 0 8; do
  HIPFILE_COLD_IO_THREADS=$n run "sync-hot-1g-cold$n" "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
  HIPFILE_COLD_IO_THREADS=$n run "batch-hot-1m-qd128-cold$n" "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
done
host1m=("${common[@]}" --bs=1M --rw=read --ioengine=hipfile-sync --mem=host --invalidate=0 --time_based --runtime=3)
run host-sync-hot-1m-inline "${host1m[@]}"
HIPFILE_INLINE_KB=64 run host-sync-hot-1m-workers "${host1m[@]}"
