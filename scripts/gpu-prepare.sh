#!/usr/bin/env bash
# Build here what the GPU machine runs, into .carry/ (ignored; named in `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
cargo build --release -p hipfile-engine --examples
mkdir -p .carry
cp target/release/libhipfile.so .carry/
[ -x target/release/hipfile-bench ] && cp target/release/hipfile-bench .carry/
# The operator tools (scripts/gpu-stats-bench.sh runs them).
cp target/release/ais-stats target/release/hipfile-check .carry/
# Experiments (engine/examples): DMA from the page cache, the hot-path probe, the copy-shape probe.
cp target/release/examples/pagecache_dma target/release/examples/hot_probe target/release/examples/copy_shape .carry/
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
    hipfile_engine) cp "$exe" .carry/engine-unit ;;
    engine_io) cp "$exe" .carry/engine-io ;;
    faults) cp "$exe" .carry/engine-faults ;;
    async_faults) cp "$exe" .carry/ffi-async-faults ;;
  esac
done <<< "$unit"
strip --strip-debug .carry/engine-* .carry/ffi-* 2>/dev/null || true
ls -la .carry
