#!/usr/bin/env bash
# The engine's POSIX storage backend (HIPFILE_IO_BACKEND=posix, what serves
# where io_uring is refused) against fio 3.33's synchronous engines psync and
# pvsync2, host memory from malloc as fio's (MEM=host: a populated mapping),
# the same 1 GiB file: cold (O_DIRECT, caches dropped)
# and page-cache hot. The io_uring backend runs beside them for reference.
# All runners of a case take turns in every round (the first runner rotates);
# the table holds medians of N rounds, and our ratio to each fio engine as the
# median of the rounds' ratios (runs of one round are neighbours in time, so
# their ratio cancels the disk's slow drifts, which a ratio of medians does not).
# Usage: scripts/bench-posix-vs-fio.sh [file] [rounds] [case pattern, e.g. cold]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)"; exit 2; }
F="${1:-$PWD/target/fio-cmp-1g.dat}"
N="${2:-5}"
ONLY="${3:-}"
# BENCH=path runs that hipfile-bench build instead (e.g. a baseline's).
if [ -n "${BENCH:-}" ]; then B=$BENCH; else
  cargo build --release -p hipfile-bench >/dev/null
  B=./target/release/hipfile-bench
fi
$B --filename="$F" --size=1G --bs=16M --rw=read --ioengine=posix --mem=host --invalidate=0 --loops=1 >/dev/null 2>&1
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
gbps() { python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"]/1e9)'; }
median() { python3 -c 'import sys,statistics; print(round(statistics.median(float(x) for x in sys.argv[1:]), 2))' "$@"; }

# name | bs | hipfile-bench engine args | cold?
cases=(
  "cold 1M sync|1M|--ioengine=hipfile-sync|1"
  "cold 4M sync|4M|--ioengine=hipfile-sync|1"
  "cold 1M batch qd16|1M|--ioengine=hipfile-batch --iodepth=16|1"
  "hot 1M sync|1M|--ioengine=hipfile-sync|0"
  "hot 4M sync|4M|--ioengine=hipfile-sync|0"
  "hot 1M batch qd16|1M|--ioengine=hipfile-batch --iodepth=16|0"
)
runners=(psync pvsync2 posix io_uring pread)
echo "| case | fio psync | fio pvsync2 | hipfile posix | hipfile io_uring | bench pread | posix/psync | posix/pvsync2 | posix/io_uring |"
paired() { python3 -c 'import sys,statistics; a=sys.argv[1].split(); b=sys.argv[2].split(); print(round(statistics.median(float(y)/float(x) for x,y in zip(a,b)), 2))' "$1" "$2"; }
echo "|---|---|---|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
  IFS='|' read -r name bs ours cold <<< "$c"
  [[ "$name" == *"$ONLY"* ]] || continue
  if [ "$cold" = 1 ]; then common="--direct=1 --invalidate=1"; else common="--direct=0 --invalidate=0 --time_based --runtime=3"; fi
  declare -A got=()
  for i in $(seq "$N"); do
    for k in $(seq 0 4); do
      r=${runners[$(( (i + k) % 5 ))]}
      if [ "$cold" = 1 ]; then drop; else cat "$F" >/dev/null; fi
      # shellcheck disable=SC2086
      case $r in
        psync|pvsync2) v=$(fio --name=cmp --filename="$F" --size=1G --bs="$bs" --rw=read --ioengine="$r" $common --output-format=json 2>/dev/null | gbps) ;;
        posix|io_uring) v=$(HIPFILE_IO_BACKEND=$r $B --filename="$F" --size=1G --bs="$bs" --rw=read --mem=${MEM:-malloc} $ours $common --output-format=json 2>/dev/null | gbps) ;;
        pread) v=$($B --filename="$F" --size=1G --bs="$bs" --rw=read --mem=${MEM:-malloc} --ioengine=posix $common --output-format=json 2>/dev/null | gbps) ;;
      esac
      got[$r]="${got[$r]:-} $(python3 -c "print(round($v, 2))")"
    done
  done
  m=(); for r in "${runners[@]}"; do m+=("$(median ${got[$r]})"); done
  printf '| %s | %s (%s) | %s (%s) | %s (%s) | %s (%s) | %s (%s) | %s | %s | %s |\n' "$name" \
    "${m[0]}" "${got[psync]# }" "${m[1]}" "${got[pvsync2]# }" "${m[2]}" "${got[posix]# }" \
    "${m[3]}" "${got[io_uring]# }" "${m[4]}" "${got[pread]# }" \
    "$(paired "${got[psync]}" "${got[posix]}")" "$(paired "${got[pvsync2]}" "${got[posix]}")" \
    "$(paired "${got[io_uring]}" "${got[posix]}")"
  unset got
done
