# Sourced by scripts/gpu-run.sh (arg "first"): an idle worker submitting one
# page-cache read alone (this build) against the build before it
# (.carry/hipfile-bench-prev: two reads in the first submission), interleaved,
# on hot 1 GiB sync reads, where every request starts with idle workers.
hot_file
P="$C/hipfile-bench-prev"
for rep in 1 2 3; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "sync-hot-1g-new-$rep" "${sync_hot[@]}"
  B="$P" run "sync-hot-1g-prev-$rep" "${sync_hot[@]}"
done
for rep in 1 2; do
  run "batch-hot-1m-qd128-new-$rep" "${batch_hot[@]}"
  B="$P" run "batch-hot-1m-qd128-prev-$rep" "${batch_hot[@]}"
done
