# Sourced by scripts/gpu-run.sh (arg "stages"): hot reads with the engine's
# per-stage chunk timings (queue, slot, storage, gpu; printed by hipfile-bench
# into bench.txt as "note: chunk stages"), to see where the hot-read gap goes.
hot_file
run copy-h2d "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
run sync-hot-1g "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
run batch-hot-1m-qd128 "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run batch-hot-1m-qd32 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run batch-hot-4m-qd32 "${common[@]}" --bs=4M --iodepth=32 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
run host-sync-hot-1g "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=host --invalidate=0 --time_based --runtime=3
run copy-h2d-2 "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
