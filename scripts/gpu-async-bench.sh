# Sourced by scripts/gpu-run.sh (args "async"): stream I/O on 4 streams against
# sync reads of the same size in the same run (issue: async >= 0.9 x sync).
hot_file
for rep in 1 2; do
  run "sync-hot-64m-$rep"   "${common[@]}" --bs=64M --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
  run "async4-hot-64m-$rep" "${common[@]}" --bs=64M --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
  run "sync4-hot-64m-$rep"  "${common[@]}" --bs=64M --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3
done
