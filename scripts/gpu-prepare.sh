#!/usr/bin/env bash
# Build here what the GPU machine runs, into .carry/ (ignored; named in `carry`),
# or into .carry/NAME with `--into NAME` (a second build for a before/after
# comparison: scripts/gpu-run.sh with BUILDS=". NAME").
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.carry
[ "${1:-}" = --into ] && dest=".carry/$2"
# hipfile-bench, the engine's examples and the test binaries turn on the engine's
# `testing` feature (its GPU test double, fault plans); the libraries (libhipfile,
# libcufile) are built last without them, so the carried ones are the shipped ones
# (cargo's last build of a crate is what target/release/ holds).
cargo build --release -p hipfile-bench
cargo build --release -p hipfile-engine --examples
mkdir -p "$dest"
[ -x target/release/hipfile-bench ] && cp target/release/hipfile-bench "$dest/"
# Probes (engine/examples) that measure the machine's own limits.
for e in pagecache_dma hot_probe copy_shape; do
  [ -x "target/release/examples/$e" ] && cp "target/release/examples/$e" "$dest/"
done
# Test binaries: the engine's unit tests (incl. the real-CUDA test), its I/O tests, and the
# fault-injection tests that scripts/gpu-run.sh faults runs against the real GPU.
msgs=$(cargo test --release -p hipfile-engine -p hipfile-ffi --no-run --message-format=json 2>/dev/null)
unit=$(echo "$msgs" | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"] in ("hipfile_engine","engine_io","faults","async_faults"):
        print(m["target"]["name"], m["executable"])')
while read -r name exe; do
  case $name in
    hipfile_engine) cp "$exe" "$dest"/engine-unit ;;
    engine_io) cp "$exe" "$dest"/engine-io ;;
    faults) cp "$exe" "$dest"/engine-faults ;;
    async_faults) cp "$exe" "$dest"/ffi-async-faults ;;
  esac
done <<< "$unit"
cargo build --release -p hipfile-ffi -p hipfile-cufile -p hipfile-gds -p ais-stats -p hipfile-check
for lib in target/release/libhipfile.so target/release/libcufile.so; do
  if nm -C "$lib" | grep -q 'gpu::testgpu\|gpu::flaky\|SeededFaults'; then
    echo "gpu-prepare: $lib carries the engine's test doubles" >&2
    exit 1
  fi
done
cp target/release/libhipfile.so "$dest/"
# The C small-read loop (gpu-run.sh small), linked by soname: it runs against
# whichever build's libhipfile.so.0 LD_LIBRARY_PATH names.
cc -O2 -Iinclude bench/c/small_reads.c -Ltarget/release -l:libhipfile.so -o "$dest/small-reads"
# The C side of python/bench/thread_files.py (plain threads reading many files).
cc -O2 -Iinclude -Iexamples bench/c/thread_files.c -Ltarget/release -l:libhipfile.so -lpthread -ldl -o "$dest/thread-files"
# libhipfile's GDS probe helper goes next to it (where libhipfile looks); the cuFile
# front into cufile/, off the other suites' LD_LIBRARY_PATH, where it would stand in
# for NVIDIA's libcufile.
cp target/release/hipfile-gds-probe "$dest/"
mkdir -p "$dest/cufile"
cp target/release/libcufile.so "$dest/cufile/libcufile.so.0"
# The operator tools.
for t in ais-stats hipfile-check; do
  [ -x "target/release/$t" ] && cp "target/release/$t" "$dest/"
done
strip --strip-debug "$dest"/* "$dest"/cufile/* 2>/dev/null || true
ls -la "$dest"
