# Sourced by scripts/gpu-run.sh (arg "probe"): where does the hot-read ceiling
# come from? engine/examples/hot_probe.rs isolates one difference between the
# engine's bounce path and the C prototype of GPU-MACHINE.md (50 GB/s) at a
# time; the engine variants beside it change one knob each. Output: probe.txt.
hot_file
P="$C/hot_probe"
{
  lscpu | grep -E "Model name|Thread|Core|Socket|L2|L3|NUMA node"
  echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
} > "$OUT/probe.txt" 2>&1
probe() { timeout 60 "$P" "$F" "$@" >> "$OUT/probe.txt" 2>&1 || echo "hot_probe $*: exit $?" >> "$OUT/probe.txt"; }
echo "## page-cache copy alone (no GPU), plain 4 KiB-page buffers" >> "$OUT/probe.txt"
for t in 1 4 8 12 16; do probe gpu=0 alloc=register threads=$t; done
probe gpu=0 alloc=register threads=12 read=uring
probe gpu=0 alloc=register threads=12 read=fixed
probe gpu=0 alloc=register threads=12 huge=1
echo "## copy to the GPU, 4 MiB chunks" >> "$OUT/probe.txt"
probe threads=12 bufs=2                      # the prototype's shape
probe threads=12 bufs=2 wait=spin
probe threads=12 bufs=2 wait=stream
probe threads=12 bufs=4
probe threads=12 bufs=2 alloc=register       # the engine's slab allocation
probe threads=12 bufs=2 alloc=register read=fixed
probe threads=12 bufs=4 alloc=register read=fixed   # closest to the engine
probe threads=12 bufs=4 alloc=register read=fixed huge=1
probe threads=8 bufs=2
probe threads=16 bufs=2
probe threads=12 bufs=2 chunk_kib=1024
probe threads=12 bufs=4 chunk_kib=1024 alloc=register read=fixed
echo "## the engine, hipfile-bench (summary.md)" >> "$OUT/probe.txt"
run copy-h2d "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --invalidate=0 --time_based --runtime=3)
run sync-hot-1g "${sync_hot[@]}" --mem=device
HIPFILE_QUEUE_DEPTH=2 run sync-hot-1g-slots2 "${sync_hot[@]}" --mem=device
HIPFILE_REGISTER_BUFFERS=false run sync-hot-1g-unfixed "${sync_hot[@]}" --mem=device
HIPFILE_IO_THREADS=16 run sync-hot-1g-16thr "${sync_hot[@]}" --mem=device
run host-sync-hot-1g "${sync_hot[@]}" --mem=host
run batch-hot-1m-qd128 "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run copy-h2d-2 "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
