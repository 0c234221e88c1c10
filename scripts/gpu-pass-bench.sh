# Sourced by scripts/gpu-run.sh (arg "pass"): one page-cache read per submission
# (HIPFILE_CACHED_READS_PER_PASS=1) against the default behaviour
# (0: every granted slot's read in one submission), interleaved, same run; then
# the cold targets again.
hot_file
run copy-h2d "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
for i in 1 2; do
  for p in 1 0; do
    HIPFILE_CACHED_READS_PER_PASS=$p run "sync-hot-1g-pass$p-$i" "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
    HIPFILE_CACHED_READS_PER_PASS=$p run "batch-hot-pass$p-$i" "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=0 --time_based --runtime=3
  done
done
HIPFILE_IO_THREADS=16 run sync-hot-1g-16thr "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
run async-hot-4jobs "${common[@]}" --bs=64M --rw=read --ioengine=hipfile-async --mem=device --numjobs=4 --group_reporting --invalidate=0 --time_based --runtime=3
run copy-h2d-2 "${common[@]}" --bs=4M --iodepth=4 --rw=read --ioengine=copy --mem=device --time_based --runtime=2
drop; run raw-seq-cold "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --time_based --runtime=3
drop; run sync-cold "${common[@]}" --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=1 --time_based --runtime=3
drop; run batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1 --time_based --runtime=3
drop; run raw-seq-cold-2 "${common[@]}" --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --time_based --runtime=3
