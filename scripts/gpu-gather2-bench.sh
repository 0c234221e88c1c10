# Sourced by scripts/gpu-run.sh (arg "gather2"): is it the event per 1 MiB
# copy, or the amount in flight, that holds 1 MiB copies under the 4 MiB rate?
# engine/examples/copy_shape.rs; output gather.txt.
P="$C/copy_shape"
probe() { timeout 60 "$P" "$@" 2>&1 | grep -E "median|failed" >> "$OUT/gather.txt" || echo "copy_shape $*: exit $?" >> "$OUT/gather.txt"; }
probe mode=whole threads=12
probe mode=h2d threads=12
probe mode=h2dev threads=12
probe mode=h2d threads=12 slot_kib=1024 entry_kib=1024 bufs=8
probe mode=h2d threads=12 slot_kib=1024 entry_kib=1024 bufs=10
probe mode=h2dev threads=12 bufs=4
probe mode=h2d threads=12 bufs=4
probe mode=h2d threads=12 slot_kib=8192 entry_kib=1024
probe mode=h2dev threads=12 slot_kib=8192 entry_kib=1024
probe mode=whole threads=12
