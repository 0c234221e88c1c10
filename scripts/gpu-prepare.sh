#!/usr/bin/env bash
# Build here what the GPU machine runs, into .carry/ (ignored; named in `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
mkdir -p .carry
cp target/release/libhipfile.so .carry/
[ -x target/release/hipfile-bench ] && cp target/release/hipfile-bench .carry/
# Test binaries: the engine's unit tests (incl. the real-CUDA test) and integration tests.
msgs=$(cargo test --release -p hipfile-engine --no-run --message-format=json 2>/dev/null)
unit=$(echo "$msgs" | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"] in ("hipfile_engine","engine_io"):
        print(m["target"]["name"], m["executable"])')
while read -r name exe; do
  case $name in hipfile_engine) cp "$exe" .carry/engine-unit ;; engine_io) cp "$exe" .carry/engine-io ;; esac
done <<< "$unit"
ls -la .carry
