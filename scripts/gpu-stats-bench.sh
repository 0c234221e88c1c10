# Sourced by scripts/gpu-run.sh (arg "stats"): what statistics cost, and what
# they show.
# 1. HIPFILE_STATS_LEVEL=1 (the default) against 0 in the same run, in
#    alternating order, on the hot targets (1 GiB sync and 1 MiB batch reads
#    into device memory) and on the call-bound shapes (4 KiB random reads from
#    the page cache, 4 jobs, into host and device memory); the ratio of each
#    pair's means goes to summary.md (target: level 1 above 0.99 of level 0).
# 2. ais-stats -w 1 transcripts while hipfile-bench runs (sync hot, batch
#    hot, batch cold), a level-3 report at exit, and hipfile-check's report.
A="$C/ais-stats"
hot_file
small=("${common[@]}" --size=1G --bs=4k --rw=randread --ioengine=hipfile-sync --numjobs=4 --group_reporting --invalidate=0 --time_based --runtime=3)
shapes() { # level rep
  HIPFILE_STATS_LEVEL=$1 run "stats$1-sync-hot-1g-$2" "${sync_hot[@]}"
  HIPFILE_STATS_LEVEL=$1 run "stats$1-batch-hot-1m-$2" "${batch_hot[@]}"
  HIPFILE_STATS_LEVEL=$1 run "stats$1-rand4k-host-4jobs-$2" "${small[@]}" --mem=host
  HIPFILE_STATS_LEVEL=$1 run "stats$1-rand4k-device-4jobs-$2" "${small[@]}" --mem=device
}
for rep in 1 2 3 4; do
  if [ $((rep % 2)) = 1 ]; then shapes 0 "$rep"; shapes 1 "$rep"; else shapes 1 "$rep"; shapes 0 "$rep"; fi
done
python3 - "$WORK/json" <<'PY' | tee -a "$OUT/summary.md"
import json, os, sys, statistics
d = sys.argv[1]
def bw(name):
    try:
        j = json.load(open(os.path.join(d, name + ".json")))["jobs"][0]["read"]
        return j["bw_bytes"], j["iops"]
    except Exception:
        return None
print("| shape | level 0 GB/s (runs) | level 1 GB/s (runs) | level 1 / level 0 (means) | IOPS ratio |")
print("|---|---|---|---|---|")
for shape in ("sync-hot-1g", "batch-hot-1m", "rand4k-host-4jobs", "rand4k-device-4jobs"):
    r = {lv: [bw(f"stats{lv}-{shape}-{rep}") for rep in (1, 2, 3, 4)] for lv in (0, 1)}
    r = {lv: [x for x in v if x] for lv, v in r.items()}
    if not r[0] or not r[1]:
        print(f"| {shape} | missing runs | | | |"); continue
    m = {lv: statistics.mean(x[0] for x in v) for lv, v in r.items()}
    io = {lv: statistics.mean(x[1] for x in v) for lv, v in r.items()}
    fmt = lambda v: ", ".join(f"{x[0]/1e9:.2f}" for x in v)
    print(f"| {shape} | {fmt(r[0])} | {fmt(r[1])} | {m[1]/m[0]:.4f} | {io[1]/io[0]:.4f} |")
PY
live() { # name, bench args...: ais-stats -w 1 on a running hipfile-bench
  local name=$1; shift
  "$B" "$@" > "$OUT/$name-bench.txt" 2>&1 &
  local bp=$!
  # -p waits until the bench has opened the library; -n bounds the view.
  timeout 60 "$A" -p "$bp" -w 1 -n 6 > "$OUT/$name.txt" 2>&1
  echo "$name: ais-stats exit $?" >> "$OUT/summary.md"
  wait "$bp"
}
live ais-stats-live-sync-hot "${sync_hot[@]}" --runtime=8
live ais-stats-live-batch-hot "${batch_hot[@]}" --runtime=8
drop; live ais-stats-live-batch-cold "${common[@]}" --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1 --time_based --runtime=8
HIPFILE_STATS_LEVEL=3 timeout 60 "$A" "$B" "${batch_hot[@]}" --runtime=2 > "$OUT/ais-stats-report-level3.txt" 2>&1
HIPFILE_STATS_LEVEL=3 timeout 60 "$A" --json "$B" "${sync_hot[@]}" --runtime=2 --output-format=json > "$OUT/ais-stats-report-level3.json" 2>&1
timeout 60 "$C/hipfile-check" > "$OUT/hipfile-check.txt" 2>&1
timeout 60 "$C/hipfile-check" --json > "$OUT/hipfile-check.json" 2>&1
