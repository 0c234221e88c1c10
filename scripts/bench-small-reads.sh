#!/usr/bin/env bash
# Small synchronous reads into host memory: hipFileRead (hipfile-bench
# --ioengine=hipfile-sync) against a plain pread loop (--ioengine=posix), and
# statistics level 1 (the default) against level 0, through the public paths.
#
#   bash scripts/bench-small-reads.sh [FILE] [ROUNDS] [CASE-PATTERN]
#
#   FILE     the 1 GiB data file (made when missing; default
#            target/small-reads-1g.dat)
#   ROUNDS   rounds per case (default 3)
#   CASE-PATTERN  run only the cases whose name contains it, e.g. "hot 4k",
#            "nj2", "cold"
#
# Cases: hot (page cache, --direct=0 --invalidate=0, the file read through
# once before every run) at 4k, 64k, 256k and 1m with numjobs 1 and 2,
# `--rw=randread --size=1G --mem=host --time_based --runtime=3`; cold (O_DIRECT,
# --direct=1, caches dropped before every run) at 4k and 1m, numjobs 1.
#
# BUILDS="name=PATH ..." compares several hipfile-bench binaries (default:
# "cur=./target/release/hipfile-bench", built first). Every build runs at
# HIPFILE_STATS_LEVEL=0 and 1 on hot cases (level 1 only on cold ones); the
# pread loop runs once per round. Runners take turns within a round and the
# first one rotates from round to round. The table gives medians of GB/s
# (summed over jobs) and p50 completion latency, and each ratio as the median
# of the rounds' paired ratios (runs of one round are neighbours in time), with
# the per-round ratios in brackets. LOCK (default /tmp/bench.lock) is taken
# exclusively around each run, so other users of the machine can take turns;
# a run of 3 rounds of every case takes about 15 minutes on the 2-core VM, so
# split it by CASE-PATTERN where a batch must stay short.
set -euo pipefail
cd "$(dirname "$0")/.."
F="${1:-$PWD/target/small-reads-1g.dat}"
N="${2:-3}"
ONLY="${3:-}"
LOCK="${LOCK:-/tmp/bench.lock}"
if [ -z "${BUILDS:-}" ]; then
  cargo build --release -p hipfile-bench >&2
  BUILDS="cur=./target/release/hipfile-bench"
fi
read -r -a builds <<< "$BUILDS"
first="${builds[0]#*=}"
[ -f "$F" ] && [ "$(stat -c %s "$F")" -ge $((1 << 30)) ] ||
  flock -x "$LOCK" "$first" --name=mk --filename="$F" --size=1G --bs=16M --rw=read \
    --ioengine=posix --mem=host --invalidate=0 --loops=1 >/dev/null 2>&1

# One run: prints "GB/s p50_us".
run() { # bin cold level engine bs numjobs
  local bin=$1 cold=$2 level=$3 engine=$4 bs=$5 nj=$6 common prep
  if [ "$cold" = 1 ]; then
    common=(--direct=1 --invalidate=1)
    prep="sync; echo 3 > /proc/sys/vm/drop_caches"
  else
    common=(--direct=0 --invalidate=0)
    prep="cat '$F' > /dev/null"
  fi
  flock -x "$LOCK" bash -c "$prep; HIPFILE_STATS_LEVEL=$level \"\$@\"" _ \
    "$bin" --name=small --filename="$F" --size=1G --rw=randread --mem=host \
    --bs="$bs" --numjobs="$nj" --ioengine="$engine" --time_based --runtime=3 \
    "${common[@]}" --output-format=json 2>/dev/null |
    python3 -c '
import json, sys
jobs = json.load(sys.stdin)["jobs"]
bw = sum(j["read"]["bw_bytes"] for j in jobs) / 1e9
p50 = jobs[0]["read"]["clat_ns"]["percentile"]["50.000000"] / 1e3
print(f"{bw:.3f} {p50:.2f}")'
}

median() { python3 -c 'import sys,statistics; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.3g}")' "$@"; }
# Median and per-round list of b/a, the rounds paired.
paired() {
  python3 -c '
import sys, statistics
a, b = sys.argv[1].split(), sys.argv[2].split()
r = [float(y) / float(x) for x, y in zip(a, b)]
each = " ".join("%.2f" % v for v in r)
print("**%.2f** (%s)" % (statistics.median(r), each))' "$1" "$2"
}

cases=()
for nj in 1 2; do
  for bs in 4k 64k 256k 1m; do cases+=("hot $bs nj$nj|0|$bs|$nj"); done
done
cases+=("cold 4k nj1|1|4k|1" "cold 1m nj1|1|1m|1")

header="| case | pread GB/s (p50 µs)"
for b in "${builds[@]}"; do
  n=${b%%=*}
  header+=" | $n L0 | $n L1 | $n L1/pread | $n L0/pread | $n L1/L0"
done
echo "$header |"
echo "$header |" | sed -e 's/[^|]\+/---/g'
for c in "${cases[@]}"; do
  IFS='|' read -r name cold bs nj <<< "$c"
  [[ "$name" == *"$ONLY"* ]] || continue
  runners=(posix)
  for b in "${builds[@]}"; do
    [ "$cold" = 1 ] || runners+=("${b%%=*}:0")
    runners+=("${b%%=*}:1")
  done
  declare -A bw=() lat=()
  for i in $(seq "$N"); do
    k=${#runners[@]}
    for j in $(seq 0 $((k - 1))); do
      r=${runners[$(((i + j) % k))]}
      if [ "$r" = posix ]; then
        out=$(run "$first" "$cold" 1 posix "$bs" "$nj")
      else
        n=${r%%:*} level=${r#*:} bin=
        for b in "${builds[@]}"; do [ "${b%%=*}" = "$n" ] && bin=${b#*=}; done
        out=$(run "$bin" "$cold" "$level" hipfile-sync "$bs" "$nj")
      fi
      read -r g p <<< "$out"
      bw[$r]="${bw[$r]:-} $g"
      lat[$r]="${lat[$r]:-} $p"
    done
  done
  cell() { [ -n "${bw[$1]:-}" ] && echo "$(median ${bw[$1]}) ($(median ${lat[$1]}))" || echo "-"; }
  line="| $name | $(cell posix)"
  for b in "${builds[@]}"; do
    n=${b%%=*}
    line+=" | $(cell "$n:0") | $(cell "$n:1") | $(paired "${bw[posix]}" "${bw[$n:1]}")"
    if [ -n "${bw[$n:0]:-}" ]; then
      line+=" | $(paired "${bw[posix]}" "${bw[$n:0]}") | $(paired "${bw[$n:0]}" "${bw[$n:1]}")"
    else
      line+=" | - | -"
    fi
  done
  echo "$line |"
  unset bw lat
done
