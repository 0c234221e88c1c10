# Sourced by scripts/gpu-run.sh (arg "shape"): run 11. The link limit for the
# copy sizes the paths use (1 MiB batch entries vs 4 MiB chunks), and the
# engine's remaining knobs around the new defaults, interleaved with repeats.
hot_file
sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
batch_hot=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3)
copy=("${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2)
run copy-4m-qd4 "${copy[@]}" --bs=4M --iodepth=4
run copy-1m-qd4 "${copy[@]}" --bs=1M --iodepth=4
run copy-1m-qd16 "${copy[@]}" --bs=1M --iodepth=16
run copy-1m-qd64 "${copy[@]}" --bs=1M --iodepth=64
run copy-1m-qd16-4jobs "${copy[@]}" --bs=1M --iodepth=16 --numjobs=4 --group_reporting
run sync-hot-1g-1 "${sync_hot[@]}"
run batch-hot-1m-qd128-1 "${batch_hot[@]}"
HIPFILE_IO_THREADS=14 run sync-hot-1g-14thr "${sync_hot[@]}"
HIPFILE_IO_THREADS=16 run sync-hot-1g-16thr "${sync_hot[@]}"
HIPFILE_CHUNK_KB=2048 HIPFILE_QUEUE_DEPTH=4 run sync-hot-1g-2m-x4 "${sync_hot[@]}"
HIPFILE_IO_THREADS=16 run batch-hot-1m-qd128-16thr "${batch_hot[@]}"
HIPFILE_POLL_COPIES=true run batch-hot-1m-qd128-poll "${batch_hot[@]}"
# 12 worker streams over the driver's default 8 hardware queues may share queues.
CUDA_DEVICE_MAX_CONNECTIONS=16 run batch-hot-1m-qd128-conn16 "${batch_hot[@]}"
CUDA_DEVICE_MAX_CONNECTIONS=16 run sync-hot-1g-conn16 "${sync_hot[@]}"
run batch-hot-1m-qd64 "${common[@]}" --bs=1M --iodepth=64 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run copy-4m-qd4-2 "${copy[@]}" --bs=4M --iodepth=4
run sync-hot-1g-2 "${sync_hot[@]}"
run batch-hot-1m-qd128-2 "${batch_hot[@]}"
run host-sync-hot-1g "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=host --invalidate=0 --time_based --runtime=3
run copy-1m-qd16-2 "${copy[@]}" --bs=1M --iodepth=16
run copy-4m-qd4-3 "${copy[@]}" --bs=4M --iodepth=4
# After the timed kernel wait (workers notice copies and queued work within 100 µs).
drop; run raw-rand4k-qd128   "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
drop; run batch-rand4k-qd128 "${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4
drop; run raw-cold   "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1 --time_based --runtime=4
drop; run sync-cold  "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=1 --time_based --runtime=4
drop; run raw-cold-2 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
