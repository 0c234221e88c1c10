# Sourced by scripts/gpu-run.sh (arg "wait"): run 14. A worker with only small
# copies in flight waits for the kernel about as long as they take (10 µs +
# 1 µs per 4 KiB) instead of 100 µs. Against the run-13 build
# (.carry/hipfile-bench-prev, a4f2132) on 4 KiB random reads; the write path
# against run 9's build (.carry/hipfile-bench-run9, 26da69d); page-cache
# reads per pass and thread count for 1 MiB batches.
hot_file
PREV="$C/hipfile-bench-prev"
RUN9="$C/hipfile-bench-run9"
with() { local b=$B; B=$1; shift; run "$@"; B=$b; }
sync_hot=("${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3)
batch_hot=("${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3)
copy=("${common[@]}" --rw=read --ioengine=copy --mem=device --time_based --runtime=2)
rand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 --mem=device --time_based --runtime=4)
rawrand=("${common[@]}" --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4)
for rep in 1 2 3; do
  drop; run "raw-rand4k-qd128-$rep" "${rawrand[@]}"
  drop; run "batch-rand4k-qd128-$rep" "${rand[@]}"
  drop; with "$PREV" "prev-batch-rand4k-qd128-$rep" "${rand[@]}"
done
drop; run raw-rand4k-qd128-4 "${rawrand[@]}"
drop; run sync-rand4k-qd1 "${common[@]}" --bs=4k --iodepth=1 --rw=randread --ioengine=hipfile-sync --direct=1 --mem=device --time_based --runtime=3
drop; run posix-rand4k-qd1 "${common[@]}" --bs=4k --iodepth=1 --rw=randread --ioengine=posix --direct=1 --mem=device --time_based --runtime=3
hot_file
for rep in 1 2; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  run "sync-hot-1g-$rep" "${sync_hot[@]}"
done
for n in 1 2 4; do HIPFILE_CACHED_READS_PER_PASS=$n run "batch-hot-1m-qd128-pass$n" "${batch_hot[@]}"; done
HIPFILE_CACHED_READS_PER_PASS=1 run sync-hot-1g-pass1 "${sync_hot[@]}"
HIPFILE_IO_THREADS=16 run batch-hot-1m-qd128-16thr "${batch_hot[@]}"
HIPFILE_IO_THREADS=16 run sync-hot-1g-16thr "${sync_hot[@]}"
run copy-4m-qd4-3 "${copy[@]}" --bs=4M --iodepth=4
W="$WORK/write-2g"
wc=(--filename="$W" --size=2G)
run copy-d2h "${common[@]}" --bs=4M --iodepth=4 --rw=write --ioengine=copy --mem=device --time_based --runtime=2
for rep in 1 2; do
  run "raw-write-$rep" "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
  run "sync-write-buffered-$rep" "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
  with "$RUN9" "run9-sync-write-buffered-$rep" "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=0
  run "sync-write-direct-$rep" "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1
  with "$RUN9" "run9-sync-write-direct-$rep" "${wc[@]}" --bs=256M --rw=write --ioengine=hipfile-sync --mem=device --direct=1
done
run raw-write-3 "${wc[@]}" --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host
drop; run raw-cold   "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1 --time_based --runtime=4
drop; run sync-cold  "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=1 --time_based --runtime=4
drop; run raw-cold-2 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --invalidate=1 --time_based --runtime=4
