#!/usr/bin/env bash
# hipfile-bench against fio (Debian's fio 3.33, --ioengine=io_uring) on the
# same 1 GiB file and parameters, cold (--direct=1, caches dropped) and
# page-cache hot. Our buffer comes from malloc, as fio's does by default
# (iomem=malloc); MEM=host gives the bench a populated mapping instead. Median of N runs each, interleaved. Prints a table of GB/s
# and the ratio ours/fio.
# Usage: scripts/bench-vs-fio.sh [file] [runs] [case pattern, e.g. cold]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)"; exit 2; }
F="${1:-$PWD/target/fio-cmp-1g.dat}"
N="${2:-3}"
ONLY="${3:-}"
# BENCH=path runs that hipfile-bench build instead (e.g. a baseline's).
if [ -n "${BENCH:-}" ]; then B=$BENCH; else
  cargo build --release -p hipfile-bench >/dev/null
  B=./target/release/hipfile-bench
fi
$B --filename="$F" --size=1G --bs=16M --rw=read --ioengine=posix --mem=host --invalidate=0 --loops=1 >/dev/null 2>&1
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
gbps_fio() { python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"]/1e9)'; }
gbps_ours() { python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"]/1e9)'; }
median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

# name | fio args | hipfile-bench args | cold?
cases=(
  "cold qd1 1M O_DIRECT|--iodepth=1 --direct=1|--ioengine=hipfile-sync --direct=1|1"
  "cold qd16 1M O_DIRECT|--iodepth=16 --direct=1|--ioengine=hipfile-batch --iodepth=16 --direct=1|1"
  "cold qd32 1M O_DIRECT|--iodepth=32 --direct=1|--ioengine=hipfile-batch --iodepth=32 --direct=1|1"
  "hot qd1 1M buffered|--iodepth=1 --direct=0|--ioengine=hipfile-sync --direct=0|0"
  "hot qd16 1M buffered|--iodepth=16 --direct=0|--ioengine=hipfile-batch --iodepth=16 --direct=0|0"
)
echo "| case | fio io_uring GB/s | hipfile-bench GB/s | ratio of medians | median of paired ratios |"
echo "|---|---|---|---|---|"
for c in "${cases[@]}"; do
  IFS='|' read -r name fargs bargs cold <<< "$c"
  [[ "$name" == *"$ONLY"* ]] || continue
  fr=(); br=()
  for i in $(seq "$N"); do
    if [ "$cold" = 1 ]; then inv=1; tb=""; else inv=0; tb="--time_based --runtime=4"; fi
    prep() { if [ "$cold" = 1 ]; then drop; else cat "$F" >/dev/null; fi; }
    run_fio() {
      # shellcheck disable=SC2086
      fr+=("$(fio --name=cmp --filename="$F" --size=1G --bs=1M --rw=read --ioengine=io_uring $fargs --invalidate=$inv $tb --output-format=json 2>/dev/null | gbps_fio)")
    }
    run_ours() {
      # shellcheck disable=SC2086
      br+=("$($B --filename="$F" --size=1G --bs=1M --rw=read --mem=${MEM:-malloc} $bargs --invalidate=$inv $tb --output-format=json 2>/dev/null | gbps_ours)")
    }
    # Alternate who goes first: a throttled (token-bucket) disk favours the first.
    if [ $((i % 2)) = 1 ]; then prep; run_fio; prep; run_ours; else prep; run_ours; prep; run_fio; fi
  done
  f=$(median "${fr[@]}"); b=$(median "${br[@]}")
  # Each iteration's two runs are neighbours in time: their ratio cancels the
  # disk's slow drifts, which a ratio of medians does not.
  paired=$(python3 -c 'import sys,statistics; a=sys.argv[1].split(); b=sys.argv[2].split(); print(statistics.median(float(y)/float(x) for x,y in zip(a,b)))' "${fr[*]}" "${br[*]}")
  printf '| %s | %.3f (%s) | %.3f (%s) | %.2f | %.2f |\n' "$name" "$f" "${fr[*]}" "$b" "${br[*]}" "$(python3 -c "print($b/$f)")" "$paired"
done
