#!/usr/bin/env bash
# Where the disk's idle time goes while COMMAND runs: the block layer's
# request tracepoints give when the disk holds at least one request, the
# scheduler's and pread's tracepoints what each named thread was doing while
# it held none (in `pread` or not, on a CPU, runnable or asleep). It
# explains, for example, why a synchronous reader leaves the disk idle
# between its requests (bench/RESULTS.md, "The 2-core VM").
#
# Usage: scripts/trace-disk-idle.sh [-m MIN_KIB] [-t THREAD_REGEX] -- COMMAND...
#   -m  count only requests of at least MIN_KIB (default 512: the data
#       reads, not the filesystem's metadata)
#   -t  the threads to follow, by name (default: the engine's workers and
#       readers, hipfile-bench's jobs, fio)
# Idle spans over 20 ms (a program's setup, a pause between its passes) are
# counted apart and left out of the shares. Needs root (perf record -a) and
# perf; the trace goes to a temporary file.
set -euo pipefail
min_kib=512
threads='^(hipfile-io|hipfile-read|job[0-9]|fio)'
while getopts "m:t:" o; do
  case $o in
    m) min_kib=$OPTARG ;;
    t) threads=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] || { echo "usage: $0 [-m MIN_KIB] [-t THREAD_REGEX] -- COMMAND..." >&2; exit 2; }
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
events=block:block_rq_issue,block:block_rq_complete,sched:sched_switch,sched:sched_wakeup
events+=,syscalls:sys_enter_pread64,syscalls:sys_exit_pread64
perf record -q -a -o "$tmp/perf.data" -e "$events" -- "$@"
perf script -i "$tmp/perf.data" 2>/dev/null > "$tmp/trace.txt"
python3 - "$tmp/trace.txt" "$min_kib" "$threads" <<'EOF'
import collections, re, sys

path, min_kib, pattern = sys.argv[1], int(sys.argv[2]), re.compile(sys.argv[3])
line_re = re.compile(r"\s*(.+?)\s+(\d+)\s+\[\d+\]\s+(\d+\.\d+):\s+(\S+):\s*(.*)")
request_re = re.compile(r"\(\) (\d+) \+ (\d+)")
events, names = [], {}
for line in open(path, errors="replace"):
    m = line_re.match(line)
    if not m:
        continue
    comm, tid, t, name, rest = m.groups()
    events.append((float(t), int(tid), name, rest))
    names.setdefault(int(tid), comm)
    if name == "sched:sched_switch":
        s = re.search(r"prev_comm=(.*?) prev_pid=(\d+).*next_comm=(.*?) next_pid=(\d+)", rest)
        if s:
            names[int(s.group(2))] = s.group(1)
            names[int(s.group(4))] = s.group(3)
events.sort(key=lambda e: e[0])
followed = sorted(t for t, n in names.items() if pattern.search(n))
state = {t: "asleep" for t in followed}
in_pread = {t: False for t in followed}

def now_state():
    return tuple(("in pread, " if in_pread[t] else "") + state[t] for t in followed)

PAUSE = 0.020
in_flight, sizes, latency = {}, collections.Counter(), []
busy = area = 0.0
gaps, pauses, idle_by_state, this_gap = [], [], collections.Counter(), collections.Counter()
idle_since = last = None
first = last_io = None
cur = now_state()
for t, tid, name, rest in events:
    if last is not None:
        dt = t - last
        if in_flight:
            busy += dt
            area += len(in_flight) * dt
        elif idle_since is not None:
            this_gap[cur] += dt
    last = t
    if name in ("block:block_rq_issue", "block:block_rq_complete"):
        m = request_re.search(rest)
        if not m or int(m.group(2)) * 512 < min_kib * 1024:
            continue
        sector = int(m.group(1))
        if name.endswith("issue"):
            if not in_flight and idle_since is not None:
                gap = t - idle_since
                if gap > PAUSE:
                    pauses.append(gap)
                else:
                    gaps.append(gap)
                    idle_by_state.update(this_gap)
                this_gap.clear()
            in_flight[sector] = t
            sizes[int(m.group(2)) // 2] += 1
            first = t if first is None else first
        elif sector in in_flight:
            latency.append(t - in_flight.pop(sector))
            if not in_flight:
                idle_since = t
            last_io = t
    elif name == "sched:sched_switch":
        m = re.search(r"prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> .*next_pid=(\d+)", rest)
        if m:
            prev, prev_state, nxt = int(m.group(1)), m.group(2), int(m.group(3))
            if prev in state:
                state[prev] = "runnable" if prev_state.startswith("R") else "asleep"
            if nxt in state:
                state[nxt] = "on a CPU"
    elif name == "sched:sched_wakeup":
        m = re.search(r"pid=(\d+)", rest)
        if m and int(m.group(1)) in state and state[int(m.group(1))] != "on a CPU":
            state[int(m.group(1))] = "runnable"
    elif name.startswith("syscalls:sys_") and tid in in_pread:
        in_pread[tid] = name.startswith("syscalls:sys_enter")
    cur = now_state()

if first is None or last_io is None:
    sys.exit(f"no requests of {min_kib} KiB or more reached the disk")
span = last_io - first - sum(pauses)
med = lambda v: sorted(v)[len(v) // 2] if v else 0.0
idle = sum(idle_by_state.values())
print(f"requests >= {min_kib} KiB: {sum(sizes.values())}, sizes KiB {dict(sizes.most_common(4))}")
print(f"from the first request to the last completion: {span * 1e3:.0f} ms "
      f"(besides {len(pauses)} pauses over {PAUSE * 1e3:.0f} ms, {sum(pauses) * 1e3:.0f} ms); disk busy "
      f"{busy / span:.0%}, {area / busy if busy else 0:.2f} requests in flight while busy")
print(f"time at the disk per request, median: {med(latency) * 1e6:.0f} us")
print(f"idle spans: {len(gaps)}, median {med(gaps) * 1e6:.0f} us, {idle * 1e3:.0f} ms in all")
if followed and idle > 0:
    print("while the disk was idle, the threads followed ("
          + ", ".join(f"{names[t]}/{t}" for t in followed) + ") were:")
    for combo, dt in idle_by_state.most_common(10):
        print(f"  {dt / idle:4.0%}  " + " | ".join(combo))
EOF
