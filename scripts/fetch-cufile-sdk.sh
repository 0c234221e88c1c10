#!/usr/bin/env bash
# Fetches NVIDIA's cufile.h and libcufile.so.0 (PyPI wheel nvidia-cufile 1.15.1.6) and
# cuda.h (nvidia-cuda-runtime 13.0.96, which cufile.h includes) into target/cufile-sdk
# (or $1): the cuFile front's C tests compile against the real header, and the
# passthrough's tests load the real library. These are NVIDIA's files, under NVIDIA's
# licence: they stay in target/ and are never committed. Without network access, copy
# them there from the wheels by hand (layout: include/cufile.h, include/cuda.h,
# lib/libcufile.so.0).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-target/cufile-sdk}
CUFILE_WHEEL="nvidia-cufile==1.15.1.6"
CUDA_WHEEL="nvidia-cuda-runtime==13.0.96"
if [ -f "$dest/include/cufile.h" ] && [ -f "$dest/include/cuda.h" ] && [ -f "$dest/lib/libcufile.so.0" ]; then
  echo "fetch-cufile-sdk: $dest is already there"
  exit 0
fi
fail() {
  echo "fetch-cufile-sdk: FAILED: $*" >&2
  echo "fetch-cufile-sdk: the cuFile front's C tests and the passthrough's tests need NVIDIA's" >&2
  echo "fetch-cufile-sdk: cufile.h and libcufile.so.0 from PyPI; they will fail until $dest is filled" >&2
  exit 1
}
python3 -m pip --version >/dev/null 2>&1 || fail "python3 -m pip is not available (apt-get install python3-pip)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cufile-sdk.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
plat="manylinux2014_$(uname -m)"
echo "fetch-cufile-sdk: downloading $CUFILE_WHEEL and $CUDA_WHEEL ($plat) from PyPI"
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform "$plat" \
  --python-version 3 --dest "$tmp" "$CUFILE_WHEEL" "$CUDA_WHEEL" ||
  fail "pip download of $CUFILE_WHEEL and $CUDA_WHEEL"
mkdir -p "$tmp/x"
for w in "$tmp"/*.whl; do
  python3 -m zipfile -e "$w" "$tmp/x" || fail "unpacking $w"
done
h=$(find "$tmp/x" -path '*/include/cufile.h' | head -1)
c=$(find "$tmp/x" -path '*/include/cuda.h' | head -1)
l=$(find "$tmp/x" -path '*/lib/libcufile.so.0' | head -1)
[ -n "$h" ] && [ -n "$c" ] && [ -n "$l" ] || fail "the wheels lack cufile.h, cuda.h or libcufile.so.0"
grep -q 'cuFileGetParameterPosixPoolSlabArray' "$h" || fail "$h is not cufile.h 1.15 (no cuFileGetParameterPosixPoolSlabArray)"
mkdir -p "$dest/include" "$dest/lib"
cp "$h" "$c" "$dest/include/"
cp "$l" "$dest/lib/"
echo "fetch-cufile-sdk: $dest/include/cufile.h, $dest/include/cuda.h, $dest/lib/libcufile.so.0"
