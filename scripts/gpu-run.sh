#!/usr/bin/env bash
# The one entry point on the GPU machine (device tool). Runs from the
# repository root with the binaries that scripts/gpu-prepare.sh built here and
# put in .carry/ (name .carry in the device call's `carry`). Results go under
# $OUT: summary.md (the tables), bench.txt (every command and its stderr) and
# bench-json.tar.gz (every hipfile-bench JSON report).
#
# Usage: scripts/gpu-run.sh SUITE...
#   correctness    C programs against CUDA device memory (sync, streams, batch,
#                  the stream interleaving matrix), examples/ reading into
#                  device memory, and the engine's tests with the real CUDA backend
#   python         python/tests (pytest) with the wheel in .carry/ against
#                  PyTorch and CuPy device arrays, DataLoader workers included
#   faults         the seeded fault-injection tests on CUDA memory and streams
#   perf           the headline figures, each beside the limit it works against
#                  (pinned copy, raw O_DIRECT storage), ROUNDS rounds (default 2)
#   loader         the data-loader shapes: many files, mid-size requests,
#                  unregistered buffers (hipfile-bench jobs, the Python package)
#   callers        several threads making plain sync reads at once (8 threads
#                  over 512 files x 4 MiB, sequential 4/16/64 MiB requests from
#                  8, 4, 2 and 1 threads), hot, unregistered device buffers,
#                  ROUNDS rounds, BUILDS rotating
#   compare-peers  the loader shapes from Python against KvikIO and against a C
#                  program over libhipfile, in the same run (KvikIO's wheels
#                  carried in .whl/)
#   hotpath        page-cache-hot sync reads with one engine setting changed
#                  at a time (HOTPATH_ROWS, HOTPATH_BS, HOTPATH_BENCH_ARGS),
#                  and hot_probe's bounce-path variants (HOTPATH_PROBE=0
#                  skips them; for an instance where hot reads are slow)
#   small          bench/c/small_reads.c: 4 KiB and 64 KiB page-cache reads
#                  through hipFileRead against pread in the same rounds, one
#                  C thread, host buffers aligned, off alignment and
#                  registered; SMALL_ROUNDS (default 20) rounds, per build
#   stats          what statistics cost (HIPFILE_STATS_LEVEL 1 against 0, in
#                  alternating order) and what ais-stats and hipfile-check show
#   fallback       the POSIX storage backend (what serves where io_uring is
#                  refused) beside io_uring and the copy limit, ROUNDS rounds
#   cufile         cuFile programs on .carry/cufile/libcufile.so.0: a C program
#                  built with nvcc against /usr/local/cuda's cufile.h, KvikIO
#                  (COMPAT_MODE=OFF) against KvikIO's own compat mode, hot (ABBA,
#                  PEERS_ROUNDS rounds, default 2) and cold (PEERS_COLD=0 skips),
#                  torch.cuda.gds (LD_PRELOAD), libhipfile's backend decision
#                  (tests/gpu/cufile_*); PEERS_BUDGET_S (default 300) bounds the
#                  KvikIO runs
#
# PERF_ROWS=REGEX keeps the perf rows whose names match (e.g. 'copy-h2d|async').
# BUILDS="a b" runs every perf row once per build, interleaved, with the build
# in .carry/a, .carry/b (a before/after comparison on one instance), the first
# build rotating from round to round; by default the build is .carry itself.
set -uo pipefail
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
ROOT=$PWD
C=$ROOT/.carry
WORK=/tmp/hipfile-gpu
mkdir -p "$WORK/json"
suites="${*:-correctness perf}"
ROUNDS="${ROUNDS:-2}"
BUILDS="${BUILDS:-.}"
log() { echo "== $*" | tee -a "$OUT/summary.md"; }
has() { [[ " $suites " == *" $1 "* ]]; }
{
  echo "# GPU machine run $(date -u +%FT%TZ), suites: $suites"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
  echo "kernel $(uname -r) ($(case "$(uname -r)" in 4.4.0*) echo gVisor ;; *) echo Firecracker ;; esac)), $(nproc) cores"
  free -g | head -2
  # The host side of hot reads differs between instances of one kind: CPU,
  # L3, NUMA layout and transparent huge pages go with every figure.
  lscpu | grep -E '^(Model name|L3 cache|NUMA node\(s\))' | tr -s ' '
  echo "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
} > "$OUT/summary.md" 2>&1
for b in $BUILDS; do ln -sf libhipfile.so "$C/$b/libhipfile.so.0"; done
export LD_LIBRARY_PATH="$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# BUILDS in the order round $1 runs them: rotated by one build each round, so
# that no build is always first (on these machines the first of two runs of
# identical code measured 0.94-0.98 x the second).
builds_in_round() {
  local -a b
  read -r -a b <<< "$BUILDS"
  local n=${#b[@]} i
  for ((i = 0; i < n; i++)); do echo "${b[$(( (i + $1 - 1) % n ))]}"; done
}

if has correctness; then
  log "build the C GPU tests with nvcc"
  for t in tests/gpu/*.c; do
    n=$(basename "$t" .c)
    case $n in cufile_*) continue ;; esac  # suite cufile
    nvcc -O2 -I include -I tests/gpu "$t" -o "$WORK/$n" -L "$C" -lhipfile -lcuda -lpthread \
      -Xlinker -rpath="$C" 2>&1 | tail -5
  done
  log "engine tests with the real CUDA backend (ignored in CI, where there is no GPU)"
  for t in "$C"/engine-unit "$C"/engine-io; do
    [ -x "$t" ] && HIPFILE_TEST_DIR="$WORK" timeout 300 "$t" --include-ignored --test-threads=1 2>&1 | tail -4 | tee -a "$OUT/summary.md"
  done
  for t in tests/gpu/*.c; do
    n=$(basename "$t" .c)
    case $n in cufile_*) continue ;; esac
    log "$n"
    # stream_interleave: ROUNDS_STREAM randomised interleavings per case and thread.
    timeout "${TEST_TIMEOUT:-400}" "$WORK/$n" "$WORK" "${ROUNDS_STREAM:-200}" > "$OUT/$n.txt" 2>&1
    echo "exit $?" >> "$OUT/$n.txt"
    grep -E '^\||passed|FAIL|HANG|exit' "$OUT/$n.txt" | tail -40 | tee -a "$OUT/summary.md"
  done
  log "examples/ into device memory (--mem=device fails without a GPU)"
  head -c $((96 * 1048576 + 12345)) /dev/urandom > "$WORK/example.bin"
  cc -std=c11 -O2 -I include examples/read_file.c -o "$WORK/read_file" -L "$C" -lhipfile -ldl \
    -Wl,-rpath,"$C" 2>&1 | tail -5
  c++ -std=c++17 -O2 -I include examples/batch_read.cpp -o "$WORK/batch_read" -L "$C" -lhipfile -ldl \
    -Wl,-rpath,"$C" 2>&1 | tail -5
  for e in read_file batch_read; do
    timeout 120 "$WORK/$e" --mem=device "$WORK/example.bin" 2>&1 | tee -a "$OUT/summary.md"
    echo "$e: exit ${PIPESTATUS[0]}" | tee -a "$OUT/summary.md"
  done
  for t in tests/gpu/*.py; do
    [ -f "$t" ] || continue
    [[ $(basename "$t") == cufile_* ]] && continue
    case $(basename "$t") in cufile_*) continue ;; esac
    log "$(basename "$t")"
    HIPFILE_LIB="$C/libhipfile.so" LIBHIPFILE="$C/libhipfile.so" PYTHONUNBUFFERED=1 \
      timeout 300 python3 "$t" "$WORK" "${ROUNDS_STREAM:-200}" > "$OUT/$(basename "$t" .py).txt" 2>&1
    echo "exit $?" | tee -a "$OUT/$(basename "$t" .py).txt"
    tail -15 "$OUT/$(basename "$t" .py).txt" >> "$OUT/summary.md"
  done
fi

# The carried wheels (ours, and KvikIO's from .whl/) into /tmp/site, once per
# run, and onto PYTHONPATH for the suites that import them.
# (--upgrade: a warm machine may hold an earlier call's build there.)
installed=0
install_wheels() {
  [ "$installed" = 1 ] && return
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    "$C"/hipfile-*.whl $( [ -d .whl ] && echo .whl/*.whl ) > "$OUT/pip.txt" 2>&1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  installed=1
}

if has python; then
  log "python/tests with device arrays (the wheel in .carry, PyTorch, CuPy)"
  install_wheels
  mkdir -p "$WORK/pytests"
  (cd python/tests && HIPFILE_TEST_DIR="$WORK/pytests" \
    timeout "${TEST_TIMEOUT:-400}" python3 -m pytest -rs -q . > "$OUT/pytest.txt" 2>&1
   echo "exit $?" >> "$OUT/pytest.txt")
  tail -12 "$OUT/pytest.txt" | tee -a "$OUT/summary.md"
fi

if has faults; then
  log "fault injection on the real GPU (HIPFILE_TEST_GPU=cuda)"
  for t in engine-faults ffi-async-faults; do
    [ -x "$C/$t" ] || continue
    HIPFILE_TEST_GPU=cuda HIPFILE_TEST_DIR="$WORK" HIPFILE_FAULT_SEEDS="${FAULT_SEEDS:-20}" \
      timeout 300 "$C/$t" --nocapture --test-threads=1 > "$OUT/$t.txt" 2>&1
    echo "$t: exit $?" | tee -a "$OUT/summary.md"
    grep -E "fault injection|test result|panicked|FAILED" "$OUT/$t.txt" | tee -a "$OUT/summary.md"
  done
fi

# One hipfile-bench run: build, name, prep (hot|hot4k|cold|-), args. Prints a table row.
F="$WORK/bench-4g"
F4K="$WORK/bench-1g-4k-folios"
bench() {
  local build=$1 name=$2 prep=$3; shift 3
  local B="$C/$build/hipfile-bench"
  case $prep in
    cold) drop ;;
    hot) cat "$F" > /dev/null ;;
    # The first GiB of the bench file written again in 4 KiB writes, so that
    # the page cache holds it in 4 KiB folios (as a file written in small
    # writes, or any file on a kernel without large folios for its
    # filesystem, is held), then read hot.
    hot4k)
      [ -f "$F4K" ] || dd if="$F" of="$F4K" bs=4k count=262144 status=none
      cat "$F4K" > /dev/null ;;
  esac
  echo "--- [$build] $name: hipfile-bench $*" >> "$OUT/bench.txt"
  local json="$WORK/json/$name.json"
  [ "$build" = . ] || json="$WORK/json/$name-$build.json"
  # Bounded: a hang costs 90 s of the lease, not all of it.
  LD_LIBRARY_PATH="$C/$build" timeout 90 "$B" "$@" --output-format=json > "$json" 2>>"$OUT/bench.txt" \
    || echo "$name: exit $?" >> "$OUT/bench.txt"
  python3 - "$json" "$name" "$build" <<'PY' | tee -a "$OUT/summary.md"
import json, sys
path, name, build = sys.argv[1:4]
try:
    jobs = json.load(open(path))["jobs"]
except Exception as e:
    print(f"| {name} | {build} | failed: {e} |"); sys.exit(0)
for job in jobs:
    label = name if len(jobs) == 1 else f"{name}/{job.get('jobname', '?')}"
    for d in ("read", "write"):
        x = job[d]
        if x["io_bytes"]:
            p = x["clat_ns"]["percentile"]
            print(f"| {label} | {build} | {d} | {x['bw_bytes']/1e9:.2f} GB/s | {x['iops']:.0f} IOPS "
                  f"| p50 {p.get('50.000000', 0)/1e3:.1f} us | p99 {p.get('99.000000', 0)/1e3:.1f} us "
                  f"| usr {job['usr_cpu']:.1f}% sys {job['sys_cpu']:.1f}% |")
PY
}
table_head() {
  echo "| run | build | dir | bandwidth | IOPS | p50 | p99 | cpu |" >> "$OUT/summary.md"
  echo "|---|---|---|---|---|---|---|---|" >> "$OUT/summary.md"
}
make_file() {
  local b="${BUILDS%% *}"
  [ -f "$F" ] || "$C/$b/hipfile-bench" --filename="$F" --size=4G --bs=16M --rw=read --ioengine=posix \
    --mem=host --invalidate=0 --loops=1 > "$OUT/create.txt" 2>&1
}

# The perf suite as data: name | prep | hipfile-bench arguments. The limits
# (copy-*, raw-*) sit next to the paths measured against them.
perf_rows() {
  local f="--filename=$F --size=4G" w="--filename=$WORK/write-2g --size=2G"
  local dev="--mem=device" t3="--time_based --runtime=3" hot="--invalidate=0"
  cat <<EOF
copy-h2d|-|$f --rw=read --ioengine=copy --bs=4M --iodepth=4 $dev --time_based --runtime=2
sync-hot-1g|hot|$f --bs=1G --rw=read --ioengine=hipfile-sync $dev $hot $t3
sync-hot-256m|hot|$f --bs=256M --rw=read --ioengine=hipfile-sync $dev $hot $t3
sync-hot-64m|hot|$f --bs=64M --rw=read --ioengine=hipfile-sync $dev $hot $t3
sync-hot-16m|hot|$f --bs=16M --rw=read --ioengine=hipfile-sync $dev $hot $t3
sync-hot-4m|hot|$f --bs=4M --rw=read --ioengine=hipfile-sync $dev $hot $t3
sync-hot-1g-4kfolios|hot4k|--filename=$F4K --size=1G --bs=1G --rw=read --ioengine=hipfile-sync $dev $hot $t3
sync-hot-256m-4kfolios|hot4k|--filename=$F4K --size=1G --bs=256M --rw=read --ioengine=hipfile-sync $dev $hot $t3
batch-hot-1m|hot|$f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch $dev $hot $t3
async-hot-64m-4jobs|hot|$f --bs=64M --iodepth=1 --numjobs=4 --group_reporting --rw=read --ioengine=hipfile-async $dev $hot $t3
raw-cold|cold|$f --bs=1M --iodepth=32 --rw=read --ioengine=raw --direct=1 --mem=host --iomem=mmaphuge --invalidate=1 --time_based --runtime=4
sync-cold-1g|cold|$f --bs=1G --rw=read --ioengine=hipfile-sync $dev --invalidate=1 --time_based --runtime=4
batch-cold-1m|cold|$f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch $dev --invalidate=1 --time_based --runtime=4
raw-rand4k-qd128|cold|$f --bs=4k --iodepth=128 --rw=randread --ioengine=raw --direct=1 --mem=host --time_based --runtime=4
batch-rand4k-qd128|cold|$f --bs=4k --iodepth=128 --rw=randread --ioengine=hipfile-batch --direct=1 $dev --time_based --runtime=4
sync-rand4k-qd1|cold|$f --bs=4k --iodepth=1 --rw=randread --ioengine=hipfile-sync --direct=1 $dev $t3
posix-rand4k-qd1|cold|$f --bs=4k --iodepth=1 --rw=randread --ioengine=posix --direct=1 $dev $t3
copy-d2h|-|$f --bs=4M --iodepth=4 --rw=write --ioengine=copy $dev --time_based --runtime=2
raw-write|-|$w --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host --iomem=mmaphuge
raw-write-durable|-|$w --bs=1M --iodepth=32 --rw=write --ioengine=raw --direct=1 --mem=host --iomem=mmaphuge --fdatasync=256
sync-write-buffered|-|$w --bs=256M --rw=write --ioengine=hipfile-sync $dev --direct=0
sync-write-direct|-|$w --bs=256M --rw=write --ioengine=hipfile-sync $dev --direct=1
EOF
}

if has perf; then
  log "perf: $ROUNDS rounds, builds: $BUILDS"
  make_file
  table_head
  for r in $(seq "$ROUNDS"); do
    while IFS='|' read -r name prep args; do
      for b in $(builds_in_round "$r"); do
        # shellcheck disable=SC2086
        bench "$b" "$name-$r" "$prep" $args
      done
    done < <(perf_rows | grep -E "^(${PERF_ROWS:-.*})[^|]*\|")
  done
fi

if has loader; then
  log "loader shapes (hipfile-bench job files in bench/jobs/loader-*.fio)"
  mkdir -p "$WORK/loader"
  table_head
  for j in bench/jobs/loader-*.fio; do
    [ -f "$j" ] || continue
    for b in $BUILDS; do
      HIPFILE_BENCH_DIR="$WORK/loader" bench "$b" "$(basename "$j" .fio)" - "$j"
    done
  done
fi

if has callers; then
  log "many callers at once: plain hipFileRead from several threads, hot, unregistered device buffers"
  make_file
  table_head
  # The loader job with every file read three times per run (a 2 GiB pass
  # takes well under 0.1 s at these rates).
  mid="$WORK/callers-mid.fio"
  sed 's/^\[global\]/[global]\nloops=3/' bench/jobs/loader-mid-files.fio > "$mid"
  HIPFILE_BENCH_DIR="$WORK/loader" "$C/${BUILDS%% *}/hipfile-bench" --section=sync-8threads-hot \
    "$mid" > /dev/null 2>&1
  for r in $(seq "$ROUNDS"); do
    for b in $(builds_in_round "$r"); do
      HIPFILE_BENCH_DIR="$WORK/loader" bench "$b" "mid-8threads-$r" - --section=sync-8threads-hot "$mid"
      for shape in "4M 8" "16M 4" "4M 2" "16M 2" "64M 2" "16M 1"; do
        read -r bs jobs <<< "$shape"
        bench "$b" "seq-$bs-x$jobs-$r" hot --filename="$F" --size=4G --bs="$bs" --rw=read \
          --ioengine=hipfile-sync --mem=device --invalidate=0 --buf_register=0 --numjobs="$jobs" \
          --group_reporting --time_based --runtime=2
      done
    done
  done
fi

if has compare-peers; then
  log "loader shapes from Python against KvikIO, and from C (python/bench/loader_shapes.py)"
  install_wheels
  # The C side: a C program over libhipfile (python/bench/loader_shapes_c.c).
  nvcc -O2 -I include python/bench/loader_shapes_c.c -o "$WORK/loader_shapes_c" -L "$C" -lhipfile \
    -Xlinker -rpath="$C" 2>&1 | tail -5
  # Every other build in BUILDS with a libhipfile.so: its own C side, in the
  # same turns (a before/after comparison of the library on these shapes).
  also=()
  for b in $BUILDS; do
    [ "$b" != . ] && [ -f "$C/$b/libhipfile.so" ] || continue
    # DT_RPATH (not RUNPATH) so that it wins over the LD_LIBRARY_PATH=$C above.
    nvcc -O2 -I include python/bench/loader_shapes_c.c -o "$WORK/loader_shapes_c-$b" -L "$C/$b" -lhipfile \
      -Xlinker --disable-new-dtags -Xlinker -rpath="$C/$b" 2>&1 | tail -5
    ldd "$WORK/loader_shapes_c-$b" | grep hipfile >> "$OUT/summary.md"
    also+=(--c-prog-also "$b=$WORK/loader_shapes_c-$b")
  done
  PYTHONUNBUFFERED=1 timeout "${PEERS_TIMEOUT:-400}" python3 python/bench/loader_shapes.py \
    --dir "$WORK/shapes" $( [ "${PEERS_COLD:-1}" = 1 ] && echo --drop-caches ) \
    --c-prog "$WORK/loader_shapes_c" "${also[@]}" ${PEERS_ARGS:-} \
    > "$OUT/loader_shapes.txt" 2>&1
  echo "loader_shapes: exit $?" | tee -a "$OUT/summary.md"
  grep -E '^\|' "$OUT/loader_shapes.txt" >> "$OUT/summary.md"
fi

# Where an instance's page-cache-hot reads lose their time: the hot sync rows
# with one engine setting changed at a time, then engine/examples/hot_probe
# (the bounce path without the engine: how it reads, allocates and waits).
# HOTPATH_ROWS: the rows, one "name|VAR=value VAR=value" a line (default
# below); HOTPATH_BS: the request sizes; HOTPATH_PROBE=0 skips hot_probe.
# Each round starts one row later, so that no setting always runs first.
hotpath_rows() {
  if [ -n "${HOTPATH_ROWS:-}" ]; then
    printf '%s\n' "$HOTPATH_ROWS"
    return
  fi
  cat <<EOF
default|
no-huge-pages|HIPFILE_HUGE_PAGES=false
unregistered|HIPFILE_REGISTER_BUFFERS=false
posix|HIPFILE_IO_BACKEND=posix
8-workers|HIPFILE_IO_THREADS=8
bound|HIPFILE_BIND_IO_THREADS=true
copy-sleep|HIPFILE_COPY_SPIN_US=0
EOF
}
if has hotpath; then
  log "hot reads under one engine setting at a time, $ROUNDS rounds"
  make_file
  table_head
  mapfile -t rows < <(hotpath_rows)
  for r in $(seq "$ROUNDS"); do
    for bs in ${HOTPATH_BS:-256M 16M}; do
      for ((i = 0; i < ${#rows[@]}; i++)); do
        IFS='|' read -r name env <<< "${rows[$(( (i + r - 1) % ${#rows[@]} ))]}"
        (
          # shellcheck disable=SC2086
          [ -n "$env" ] && export $env
          # shellcheck disable=SC2086
          bench . "hot-$bs-$name-$r" hot --filename="$F" --size=4G --bs="$bs" --rw=read \
            --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=3 \
            ${HOTPATH_BENCH_ARGS:-}
        )
      done
    done
  done
  for v in "read=pread alloc=hostalloc" "read=fixed alloc=register huge=1" "read=uring alloc=register huge=1" \
    "read=pread alloc=hostalloc gpu=0" "read=fixed alloc=register huge=1 gpu=0"; do
    [ "${HOTPATH_PROBE:-1}" = 1 ] || break
    # shellcheck disable=SC2086
    timeout 60 "$C/hot_probe" "$F" threads=16 passes=3 $v 2>&1 | tail -1 | tee -a "$OUT/summary.md"
  done
fi

if has small; then
  log "small reads from C: pread / hipFileRead per round (median, min, max), hot 4 GiB file"
  make_file
  cat "$F" > /dev/null
  for shape in "4096 4096 0" "4096 16 0" "4096 4096 1" "65536 4096 0"; do
    read -r bs align reg <<< "$shape"
    for b in $(builds_in_round 1); do
      echo -n "build $b, level ${HIPFILE_STATS_LEVEL:-1}: " | tee -a "$OUT/summary.md"
      LD_LIBRARY_PATH="$C/$b" timeout 120 "$C/small-reads" "$F" "$bs" "${SMALL_ROUNDS:-20}" 200000 \
        "$align" "$reg" 2>>"$OUT/bench.txt" | tee -a "$OUT/summary.md"
    done
  done
fi

if has stats; then
  log "statistics: level 1 against level 0, alternating, ${STATS_ROUNDS:-4} rounds"
  make_file
  table_head
  f="--filename=$F --size=4G" hot="--mem=device --invalidate=0 --time_based --runtime=3"
  small="--filename=$F --size=1G --bs=4k --rw=randread --ioengine=hipfile-sync --numjobs=4 --group_reporting --invalidate=0 --time_based --runtime=3"
  shapes() { # level round
    # shellcheck disable=SC2086
    {
      HIPFILE_STATS_LEVEL=$1 bench . "stats$1-sync-hot-1g-$2" hot $f --bs=1G --rw=read --ioengine=hipfile-sync $hot
      HIPFILE_STATS_LEVEL=$1 bench . "stats$1-batch-hot-1m-$2" hot $f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch $hot
      HIPFILE_STATS_LEVEL=$1 bench . "stats$1-rand4k-host-4jobs-$2" hot $small --mem=host
      HIPFILE_STATS_LEVEL=$1 bench . "stats$1-rand4k-device-4jobs-$2" hot $small --mem=device
    }
  }
  for r in $(seq "${STATS_ROUNDS:-4}"); do
    if [ $((r % 2)) = 1 ]; then shapes 0 "$r"; shapes 1 "$r"; else shapes 1 "$r"; shapes 0 "$r"; fi
  done
  python3 - "$WORK/json" <<'PY' | tee -a "$OUT/summary.md"
import json, os, sys, statistics
d = sys.argv[1]
def bw(name):
    try:
        return json.load(open(os.path.join(d, name + ".json")))["jobs"][0]["read"]["bw_bytes"]
    except Exception:
        return None
print("| shape | level 0 GB/s | level 1 GB/s | level 1 / level 0 (means) |")
print("|---|---|---|---|")
for shape in ("sync-hot-1g", "batch-hot-1m", "rand4k-host-4jobs", "rand4k-device-4jobs"):
    r = {lv: [x for x in (bw(f"stats{lv}-{shape}-{k}") for k in range(1, 9)) if x] for lv in (0, 1)}
    if not r[0] or not r[1]:
        print(f"| {shape} | missing runs | | |"); continue
    fmt = lambda v: ", ".join(f"{x/1e9:.2f}" for x in v)
    print(f"| {shape} | {fmt(r[0])} | {fmt(r[1])} | {statistics.mean(r[1])/statistics.mean(r[0]):.4f} |")
PY
  live() { # name, bench args...: ais-stats -w 1 beside a running hipfile-bench
    local name=$1; shift
    "$C/hipfile-bench" "$@" > "$OUT/$name-bench.txt" 2>&1 &
    local bp=$!
    timeout 60 "$C/ais-stats" -p "$bp" -w 1 -n 6 > "$OUT/$name.txt" 2>&1
    echo "$name: ais-stats exit $?" >> "$OUT/summary.md"
    wait "$bp"
  }
  # shellcheck disable=SC2086
  {
    live ais-stats-live-sync-hot $f --bs=1G --rw=read --ioengine=hipfile-sync --mem=device --invalidate=0 --time_based --runtime=8
    drop; live ais-stats-live-batch-cold $f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch --mem=device --invalidate=1 --time_based --runtime=8
    HIPFILE_STATS_LEVEL=3 timeout 60 "$C/ais-stats" "$C/hipfile-bench" $f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch $hot > "$OUT/ais-stats-report-level3.txt" 2>&1
  }
  timeout 60 "$C/hipfile-check" > "$OUT/hipfile-check.txt" 2>&1
fi

# The fallback suite as data: name | prep | environment | arguments.
fallback_rows() {
  local f="--filename=$F --size=4G" dev="--mem=device" t3="--time_based --runtime=3" hot="--invalidate=0"
  local t4="--time_based --runtime=4" px="HIPFILE_IO_BACKEND=posix" ur="HIPFILE_IO_BACKEND=io_uring"
  cat <<EOF
copy-h2d|-|-|$f --rw=read --ioengine=copy --bs=4M --iodepth=4 $dev --time_based --runtime=2
posix-sync-hot-1g|hot|$px|$f --bs=1G --rw=read --ioengine=hipfile-sync $dev $hot $t3
uring-sync-hot-1g|hot|$ur|$f --bs=1G --rw=read --ioengine=hipfile-sync $dev $hot $t3
posix-batch-hot-1m|hot|$px|$f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch $dev $hot $t3
uring-batch-hot-1m|hot|$ur|$f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch $dev $hot $t3
posix-sync-cold-1g|cold|$px|$f --bs=1G --rw=read --ioengine=hipfile-sync $dev --invalidate=1 $t4
posix-batch-cold-1m|cold|$px|$f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch $dev --invalidate=1 $t4
uring-batch-cold-1m|cold|$ur|$f --bs=1M --iodepth=128 --rw=read --ioengine=hipfile-batch $dev --invalidate=1 $t4
EOF
}

if has fallback; then
  log "fallback: the POSIX storage backend beside io_uring and the copy limit, $ROUNDS rounds"
  make_file
  table_head
  for r in $(seq "$ROUNDS"); do
    while IFS='|' read -r name prep envs args; do
      for b in $(builds_in_round "$r"); do
        # shellcheck disable=SC2086
        (if [ "$envs" != - ]; then export $envs; fi; bench "$b" "$name-$r" "$prep" $args)
      done
    done < <(fallback_rows)
  done
fi

if has cufile; then
  CU=$C/cufile
  ln -sf libcufile.so.0 "$CU/libcufile.so"
  log "cufile_front: a cuFile C program (NVIDIA's cufile.h) on hipfile-rs's libcufile.so.0"
  nvcc -O2 tests/gpu/cufile_front.c -o "$WORK/cufile_front" -L "$CU" -lcufile -lcuda -ldl \
    -Xlinker -rpath="$CU" 2>&1 | tail -5
  LD_LIBRARY_PATH="$CU:$LD_LIBRARY_PATH" timeout 150 "$WORK/cufile_front" "$WORK" > "$OUT/cufile_front.txt" 2>&1
  echo "exit $?" >> "$OUT/cufile_front.txt"
  grep -E '^(==|libcufile|BAR1|FAIL|HANG)|passed|exit' "$OUT/cufile_front.txt" | tail -40 | tee -a "$OUT/summary.md"
  log "cufile_observe: NVIDIA's libcufile and hipfile-rs's on the same calls (a record, not a test)"
  nvcc -O2 tests/gpu/cufile_observe.c -o "$WORK/cufile_observe" -lcufile -lcuda -ldl 2>&1 | tail -5
  nv=$(dirname "$(readlink -f /usr/local/cuda/lib64/libcufile.so.0)")
  LD_LIBRARY_PATH="$nv:$LD_LIBRARY_PATH" CUFILE_LOGFILE_PATH="$OUT/cufile-nvidia.log" timeout 45 \
    "$WORK/cufile_observe" "$WORK" > "$OUT/cufile_observe-nvidia.txt" 2>&1
  echo "exit $?" >> "$OUT/cufile_observe-nvidia.txt"
  LD_LIBRARY_PATH="$CU:$LD_LIBRARY_PATH" timeout 45 "$WORK/cufile_observe" "$WORK" \
    > "$OUT/cufile_observe-ours.txt" 2>&1
  echo "exit $?" >> "$OUT/cufile_observe-ours.txt"
  diff "$OUT/cufile_observe-nvidia.txt" "$OUT/cufile_observe-ours.txt" > "$OUT/cufile_observe.diff"
  echo "cufile_observe: $(grep -c '^[<>]' "$OUT/cufile_observe.diff") differing lines (cufile_observe.diff)" | tee -a "$OUT/summary.md"
  log "KvikIO, torch.cuda.gds and libhipfile's backend (tests/gpu/cufile_peers.py)"
  if [ -d .whl ] && [ ! -d /tmp/site/kvikio ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  fi
  [ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  HIPFILE_CUFILE_DIR="$CU" HIPFILE_LIB_DIR="$C" PYTHONUNBUFFERED=1 PEERS_BUDGET_S="${PEERS_BUDGET_S:-300}" timeout 480 \
    python3 tests/gpu/cufile_peers.py "$WORK" "$OUT" > "$OUT/cufile_peers.txt" 2>&1
  echo "exit $?" | tee -a "$OUT/cufile_peers.txt"
  cat "$OUT/cufile_peers.md" >> "$OUT/summary.md" 2>/dev/null || tail -20 "$OUT/cufile_peers.txt" >> "$OUT/summary.md"
fi

tar -C "$WORK" -czf "$OUT/bench-json.tar.gz" json 2>/dev/null
log "done"
