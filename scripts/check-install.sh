#!/usr/bin/env bash
# Install check (CI): build with `make`, check the exported symbols, install into a
# temporary prefix, build examples/ against the installed package through CMake and
# through pkg-config (and link libhipfile.a statically), run them and the tools' --help,
# uninstall and require an empty prefix; then the same with DESTDIR, and `make dist`.
# Needs make, cmake, pkg-config, gcc/g++ (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
fail() { echo "check-install: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/hipfile-install.XXXXXX")
trap 'rm -rf "$work"' EXIT

step "make"
make --no-print-directory build >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "make"; }
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
IFS=. read -r major minor patch <<<"$version"
for m in "MAJOR $major" "MINOR $minor" "PATCH $patch"; do
  set -- $m
  grep -q "^#define HIPFILE_VERSION_$1 $2\$" include/hipfile.h ||
    fail "include/hipfile.h HIPFILE_VERSION_$1 is not $2 (Cargo.toml says $version)"
done

# The exported symbols are exactly the API of include/hipfile.h, each at its version node
# of ffi/libhipfile.map, plus the node itself.
check_symbols() {
  local so=$1
  local header map got want
  header=$(sed -n 's/^HIPFILE_API.*[ *]\(hipFile[A-Za-z0-9_]*\)(.*/\1/p' include/hipfile.h | sort)
  map=$(sed -n 's/^ *\(hipFile[A-Za-z0-9_]*\);$/\1/p' ffi/libhipfile.map | sort)
  [ "$header" = "$map" ] || fail "ffi/libhipfile.map and include/hipfile.h name different functions:
$(diff <(echo "$header") <(echo "$map"))"
  want=$(awk '/^[A-Z][A-Z0-9_.]* *\{/ {node=$1} /^ *hipFile[A-Za-z0-9_]*;$/ {sub(/;/,""); gsub(/ /,""); print $0 "@@" node} /^\}/ {print node}' ffi/libhipfile.map | sort -u)
  got=$(nm -D --defined-only "$so" | awk '{print $NF}' | sort)
  [ "$got" = "$want" ] || fail "$so exports a different set than ffi/libhipfile.map:
$(diff <(echo "$want") <(echo "$got"))"
  echo "$so: $(echo "$header" | wc -l) functions, $(echo "$want" | grep -vc @) version node(s): $(echo "$want" | grep -v @ | tr '\n' ' ')"
}
check_symbols "target/release/libhipfile.so.$version"
# The shipped libraries hold no test double: the engine's `testing` feature (which
# hipfile-bench turns on) must not be unified into them.
for lib in "target/release/libhipfile.so.$version" target/release/libhipfile.a target/release/libcufile.so; do
  if nm -C "$lib" 2>/dev/null | grep -q 'gpu::testgpu\|gpu::flaky\|SeededFaults'; then
    fail "$lib carries the engine's test doubles (built together with hipfile-bench?)"
  fi
done
[ "$(readlink target/release/libhipfile.so.$major)" = "libhipfile.so.$version" ] || fail "no target/release/libhipfile.so.$major link"
[[ "$(readelf -d "target/release/libhipfile.so.$version")" == *"Library soname: [libhipfile.so.$major]"* ]] || fail "SONAME is not libhipfile.so.$major"

# A file that is not a multiple of any chunk or page size.
data="$work/data.bin"
head -c $((9 * 1048576 + 12345)) /dev/urandom >"$data"

# Builds the examples against the package in prefix $1 both ways, and runs them.
build_and_run() {
  local prefix=$1 tag=$2 out="$work/$2"
  mkdir -p "$out"
  step "$tag: CMake (find_package(hipfile), hip::hipfile)"
  cmake -S examples -B "$out/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS=-Werror -DCMAKE_CXX_FLAGS=-Werror >"$out/cmake.log" 2>&1 ||
    { cat "$out/cmake.log"; fail "$tag: cmake configure"; }
  cmake --build "$out/cmake" >>"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; fail "$tag: cmake build"; }
  # The programs find the library through the RPATH CMake recorded, not the environment.
  env -u LD_LIBRARY_PATH "$out/cmake/hipfile-read-file" "$data" || fail "$tag: hipfile-read-file (CMake)"
  env -u LD_LIBRARY_PATH "$out/cmake/hipfile-batch-read" "$data" || fail "$tag: hipfile-batch-read (CMake)"
  ldd "$out/cmake/hipfile-read-file" >"$out/ldd.txt"
  grep -q "libhipfile.so.$major => $prefix/" "$out/ldd.txt" ||
    fail "$tag: the CMake build does not load $prefix's library"

  step "$tag: pkg-config"
  export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
  [ "$(pkg-config --modversion hipfile)" = "$version" ] || fail "$tag: pkg-config --modversion"
  local libdir
  libdir=$(pkg-config --variable=libdir hipfile)
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Wextra -Werror -pedantic examples/read_file.c -o "$out/read-pc" \
    $(pkg-config --cflags --libs hipfile) -ldl -Wl,-rpath,"$libdir" || fail "$tag: cc with pkg-config"
  # shellcheck disable=SC2046
  c++ -std=c++17 -Wall -Wextra -Werror examples/batch_read.cpp -o "$out/batch-pc" \
    $(pkg-config --cflags --libs hipfile) -ldl -Wl,-rpath,"$libdir" || fail "$tag: c++ with pkg-config"
  env -u LD_LIBRARY_PATH "$out/read-pc" --mem=host "$data" || fail "$tag: read_file (pkg-config)"
  env -u LD_LIBRARY_PATH "$out/batch-pc" --mem=host "$data" || fail "$tag: batch_read (pkg-config)"
  # The contract test of the whole C API, against the installed library.
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Wextra -Werror -pedantic -pthread tests/c/invalid_args.c -o "$out/invalid_args" \
    $(pkg-config --cflags --libs hipfile) -Wl,-rpath,"$libdir" || fail "$tag: tests/c/invalid_args.c"
  env -u LD_LIBRARY_PATH "$out/invalid_args" "$work" >"$out/invalid_args.log" 2>&1 ||
    { cat "$out/invalid_args.log"; fail "$tag: invalid_args against the installed library"; }
  tail -1 "$out/invalid_args.log"

  step "$tag: static (libhipfile.a, pkg-config --static)"
  # -Bstatic takes libhipfile.a; --as-needed then drops the .so that --libs names again.
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Wextra -Werror examples/read_file.c -o "$out/read-static" $(pkg-config --cflags hipfile) \
    $(pkg-config --libs-only-L hipfile) -Wl,-Bstatic -lhipfile -Wl,-Bdynamic \
    -Wl,--as-needed $(pkg-config --static --libs hipfile) -ldl || fail "$tag: static link"
  ldd "$out/read-static" >"$out/ldd-static.txt"
  grep -q libhipfile "$out/ldd-static.txt" && fail "$tag: the static build still needs libhipfile.so"
  "$out/read-static" --mem=host "$data" || fail "$tag: read_file (static)"
  unset PKG_CONFIG_PATH

  step "$tag: tools"
  local t
  for t in "$prefix"/bin/*; do
    [ -e "$t" ] || continue
    "$t" --help >"$out/help.txt" 2>&1 || fail "$tag: $t --help exits non-zero"
    [ -s "$out/help.txt" ] || fail "$tag: $t --help prints nothing"
    echo "$(basename "$t") --help: $(head -1 "$out/help.txt")"
  done
  [ -x "$prefix/bin/hipfile-bench" ] || fail "$tag: hipfile-bench is not installed"
}

# The cuFile front: in lib/hipfile-cufile/ (never in lib/, where it would stand in for
# NVIDIA's libcufile), exporting cufile/libcufile.map exactly; NVIDIA's cufile.h test
# program runs against it; the GDS probe helper is where libhipfile looks for it.
check_cufile() {
  local prefix=$1 so="$1/lib/hipfile-cufile/libcufile.so.0" got want
  step "cuFile front in $prefix/lib/hipfile-cufile"
  [ -f "$so" ] || fail "no $so"
  [ "$(readlink "$prefix/lib/hipfile-cufile/libcufile.so")" = libcufile.so.0 ] || fail "lib/hipfile-cufile/libcufile.so link"
  [ -e "$prefix/lib/libcufile.so.0" ] && fail "libcufile.so.0 installed into lib/, where it shadows NVIDIA's"
  [[ "$(readelf -d "$so")" == *"Library soname: [libcufile.so.0]"* ]] || fail "$so: SONAME is not libcufile.so.0"
  want=$(sed -n 's/^ *\(cuFile[A-Za-z0-9_]*\|hipfile_[a-z_]*\);$/\1/p' cufile/libcufile.map | sort)
  got=$(nm -D --defined-only "$so" | awk '{print $NF}' | sort)
  [ "$got" = "$want" ] || fail "$so exports a different set than cufile/libcufile.map:
$(diff <(echo "$want") <(echo "$got"))"
  echo "$so: $(echo "$want" | grep -c '^cuFile') cuFile functions"
  bash scripts/fetch-cufile-sdk.sh >/dev/null || fail "NVIDIA's cufile.h (scripts/fetch-cufile-sdk.sh)"
  cc -std=c11 -Wall -Wextra -Werror -I target/cufile-sdk/include tests/cufile/api.c -o "$work/cufile-api" \
    -L "$prefix/lib/hipfile-cufile" -lcufile -ldl -Wl,-rpath,"$prefix/lib/hipfile-cufile" || fail "tests/cufile/api.c"
  env -u LD_LIBRARY_PATH "$work/cufile-api" "$work" >"$work/cufile-api.log" 2>&1 ||
    { cat "$work/cufile-api.log"; fail "tests/cufile/api.c against the installed libcufile.so.0"; }
  tail -1 "$work/cufile-api.log"
  [ -x "$prefix/lib/hipfile/hipfile-gds-probe" ] || fail "no lib/hipfile/hipfile-gds-probe"
  "$prefix/lib/hipfile/hipfile-gds-probe" --help >/dev/null || fail "hipfile-gds-probe --help"
}

prefix="$work/prefix"
mkdir -p "$prefix"
step "make install PREFIX=$prefix"
make --no-print-directory install PREFIX="$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "make install"; }
for f in "lib/libhipfile.so.$version" "lib/libhipfile.a" include/hipfile.h include/hipfile-api-trace.h \
  lib/pkgconfig/hipfile.pc lib/cmake/hipfile/hipfile-config.cmake lib/cmake/hipfile/hipfile-config-version.cmake; do
  [ -f "$prefix/$f" ] || fail "install did not write $f"
done
[ "$(readlink "$prefix/lib/libhipfile.so.$major")" = "libhipfile.so.$version" ] || fail "lib/libhipfile.so.$major link"
[ "$(readlink "$prefix/lib/libhipfile.so")" = "libhipfile.so.$major" ] || fail "lib/libhipfile.so link"
check_symbols "$prefix/lib/libhipfile.so.$version"
build_and_run "$prefix" installed
check_cufile "$prefix"

step "make uninstall PREFIX=$prefix"
make --no-print-directory uninstall PREFIX="$prefix" >"$work/uninstall.log" 2>&1 ||
  { cat "$work/uninstall.log"; fail "make uninstall"; }
left=$(find "$prefix" -mindepth 1)
[ -z "$left" ] || fail "uninstall left behind:
$left"

step "make install/uninstall with DESTDIR"
stage="$work/stage"
make --no-print-directory install PREFIX=/opt/hipfile DESTDIR="$stage" >"$work/destdir.log" 2>&1 ||
  { cat "$work/destdir.log"; fail "make install DESTDIR"; }
[ -f "$stage/opt/hipfile/lib/libhipfile.so.$version" ] || fail "DESTDIR install: no library under $stage/opt/hipfile"
grep -qx "prefix=/opt/hipfile" "$stage/opt/hipfile/lib/pkgconfig/hipfile.pc" || fail "DESTDIR leaked into hipfile.pc"
make --no-print-directory uninstall PREFIX=/opt/hipfile DESTDIR="$stage" >>"$work/destdir.log" 2>&1 ||
  fail "make uninstall DESTDIR"
left=$(find "$stage" -mindepth 1 -not -type d)
[ -z "$left" ] || fail "DESTDIR uninstall left behind:
$left"

step "make dist"
make --no-print-directory dist >"$work/dist.log" 2>&1 || { cat "$work/dist.log"; fail "make dist"; }
tarball="target/dist/hipfile-$version-linux-$(uname -m).tar.gz"
[ -f "$tarball" ] || fail "no $tarball"
# (Listed to a file: grep -q would stop reading early and pipefail would count tar's SIGPIPE.)
tar -tzf "$tarball" >"$work/tar.list"
for f in "lib/libhipfile.so.$version" lib/libhipfile.a include/hipfile.h lib/cmake/hipfile/hipfile-config.cmake \
  lib/pkgconfig/hipfile.pc bin/hipfile-bench lib/hipfile-cufile/libcufile.so.0 lib/hipfile/hipfile-gds-probe; do
  grep -qx "usr/local/$f" "$work/tar.list" || fail "$tarball lacks usr/local/$f"
done
# The unpacked tree works where it lies (CMake finds its prefix from the config file's place).
mkdir -p "$work/unpacked"
tar -C "$work/unpacked" -xzf "$tarball"
cmake -S examples -B "$work/unpacked-build" -DCMAKE_PREFIX_PATH="$work/unpacked/usr/local" >"$work/unpacked.log" 2>&1 &&
  cmake --build "$work/unpacked-build" >>"$work/unpacked.log" 2>&1 || { cat "$work/unpacked.log"; fail "build against the unpacked tarball"; }
"$work/unpacked-build/hipfile-read-file" --mem=host "$data" >/dev/null || fail "example against the unpacked tarball"
if command -v dpkg-deb >/dev/null; then
  deb=$(ls target/dist/hipfile_"$version"_*.deb)
  dpkg-deb --contents "$deb" >"$work/deb.list"
  grep -q "/usr/lib/.*/libhipfile.so.$version\$" "$work/deb.list" || fail "$deb lacks the library"
  dpkg-deb --field "$deb" Package Version
fi
echo "check-install: all passed"
