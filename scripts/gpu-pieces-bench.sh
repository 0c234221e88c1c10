# Sourced by scripts/gpu-run.sh (arg "pieces"): session 15. Hot synchronous
# reads of 16 MiB to 1 GiB against HIPFILE_PIECES_PER_WORKER (1, 2, 4: how
# many pieces per worker a request is cut into) and HIPFILE_FIRST_READ_ALONE
# (the list `first` of session 14), interleaved, each round next to its copy
# limit; then hot 1 MiB batches with and without the first read alone, and
# HIPFILE_CACHED_READS_PER_PASS=1 (its per-pass limit fixed in session 14).
hot_file
sh=(--rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=2)
for rep in 1 2; do
  run "copy-4m-qd4-$rep" "${copy[@]}" --bs=4M --iodepth=4
  for bs in 16M 64M 256M 1G; do
    for k in 1 2 4; do
      HIPFILE_PIECES_PER_WORKER=$k run "sync-hot-$bs-k$k-$rep" "${common[@]}" --bs=$bs "${sh[@]}"
    done
    HIPFILE_FIRST_READ_ALONE=true run "sync-hot-$bs-alone-$rep" "${common[@]}" --bs=$bs "${sh[@]}"
    HIPFILE_FIRST_READ_ALONE=true HIPFILE_PIECES_PER_WORKER=2 run "sync-hot-$bs-k2-alone-$rep" "${common[@]}" --bs=$bs "${sh[@]}"
  done
  HIPFILE_CACHED_READS_PER_PASS=1 run "sync-hot-1G-perpass1-$rep" "${common[@]}" --bs=1G "${sh[@]}"
done
for rep in 1 2; do
  run "copy-4m-qd4-b$rep" "${copy[@]}" --bs=4M --iodepth=4
  run "batch-hot-1m-qd128-$rep" "${batch_hot[@]}"
  HIPFILE_FIRST_READ_ALONE=true run "batch-hot-1m-qd128-alone-$rep" "${batch_hot[@]}"
done
run async4-hot-64m "${common[@]}" --bs=64M --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
HIPFILE_FIRST_READ_ALONE=true run async4-hot-64m-alone "${common[@]}" --bs=64M --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async --mem=device --invalidate=0 --time_based --runtime=3
