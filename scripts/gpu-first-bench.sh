# Sourced by scripts/gpu-run.sh (arg "first"): HIPFILE_FIRST_READ_ALONE (an
# idle worker submits one page-cache read alone, so its first GPU copy does
# not wait for two) against the default, interleaved, on hot 1 GiB sync reads
# (every request starts with idle workers) and hot 1 MiB batches.
hot_file
for rep in 1 2 3; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  HIPFILE_FIRST_READ_ALONE=true run "sync-hot-1g-alone-$rep" "${sync_hot[@]}"
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
done
for rep in 1 2; do
  HIPFILE_FIRST_READ_ALONE=true run "batch-hot-1m-qd128-alone-$rep" "${batch_hot[@]}"
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
done
