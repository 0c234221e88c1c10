#!/usr/bin/env bash
# hipfile-bench against fio 3.33 and the tools written for fio's output (part
# of scripts/test.sh): bench/tests/fio_compat.py runs in a fresh virtual
# environment with fio-plot (PyPI, which brings matplotlib for
# scripts/plot-bench) and six (fio_jsonplus_clat2csv imports it). fio itself
# comes from Debian (.ci/run installs it). HIPFILE_SKIP_FIO_COMPAT=1 leaves the
# check out, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${HIPFILE_SKIP_FIO_COMPAT:-0}" = 1 ]; then
  echo "SKIPPED: hipfile-bench against fio 3.33 (HIPFILE_SKIP_FIO_COMPAT=1)"
  exit 0
fi
. scripts/python-venv.sh
env_dir=target/fio-compat-env
[ -x "$env_dir/bin/python" ] || "$PY" -m venv "$env_dir"
"$env_dir/bin/python" -c 'import fio_plot, six, matplotlib' 2>/dev/null \
  || "$env_dir/bin/pip" install -q --disable-pip-version-check fio-plot six
cargo build --release -p hipfile-bench
"$env_dir/bin/python" bench/tests/fio_compat.py
