# Sourced by scripts/gpu-run.sh (arg "check15"): session 15's last build on
# the hot 1 MiB batch and 1 GiB sync reads, next to the copy limit.
hot_file
run copy-4m-qd4 "${copy[@]}" --bs=4M --iodepth=4
run batch-hot-1m-qd128 "${batch_hot[@]}"
run sync-hot-1g "${sync_hot[@]}"
