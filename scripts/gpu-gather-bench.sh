# Sourced by scripts/gpu-run.sh (arg "gather"): would 1 MiB batch entries
# reach the 4 MiB copy rate if a worker copied a whole bounce slot to device
# staging and placed the pieces with device-to-device copies?
# engine/examples/copy_shape.rs (copies only, no file); output gather.txt.
hot_file
P="$C/copy_shape"
probe() { timeout 60 "$P" "$@" 2>&1 | grep -E "median|failed" >> "$OUT/gather.txt" || echo "copy_shape $*: exit $?" >> "$OUT/gather.txt"; }
for t in 12 4; do
  probe mode=whole threads=$t
  probe mode=h2d threads=$t
  probe mode=gather threads=$t
  probe mode=gather2 threads=$t
done
probe mode=gather threads=12 bufs=4
probe mode=h2d threads=12 entry_kib=256
probe mode=gather threads=12 entry_kib=256
probe mode=h2d threads=12 slot_kib=1024 entry_kib=1024
probe mode=whole threads=12 slot_kib=16384 entry_kib=1024
probe mode=gather threads=12 slot_kib=16384 entry_kib=1024
probe mode=whole threads=12
copy=("${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2)
run copy-4m-qd4 "${copy[@]}" --bs=4M --iodepth=4
run copy-1m-qd16 "${copy[@]}" --bs=1M --iodepth=16
run batch-hot-1m-qd128 "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run sync-hot-1g "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
