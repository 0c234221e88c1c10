# Sourced by scripts/gpu-run.sh (arg "batchcopy"): session 15's probe. Does
# cuMemcpyBatchAsync (one driver call for several copies) carry 1 MiB (and
# 256 KiB) host-to-device copies better than the same copies queued one by
# one? 16 threads (the engine's default), two pinned slots each, copies only.
P="$C/copy_shape"
{
  for rep in 1 2; do
    "$P" mode=whole threads=16
    for e in 1024 256; do
      "$P" mode=h2d threads=16 entry_kib=$e
      "$P" mode=batch threads=16 entry_kib=$e
    done
    "$P" mode=h2d threads=16 slot_kib=16384 entry_kib=1024
    "$P" mode=batch threads=16 slot_kib=16384 entry_kib=1024
  done
} 2>&1 | tee "$OUT/batchcopy.txt" | grep median | tee -a "$OUT/summary.md"
