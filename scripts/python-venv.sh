# Sourced (from the repository root) by the scripts whose tests run in a
# Python virtual environment: scripts/test-python.sh, scripts/test-fio-compat.sh.
# Exports HIPFILE_TEST_DIR as scripts/test.sh does, sets PY (the interpreter:
# $PYTHON, else python3) and makes sure it can create virtual environments,
# installing Debian's python3-venv when it cannot.
# shellcheck shell=bash
export HIPFILE_TEST_DIR="${HIPFILE_TEST_DIR:-$PWD/target/test-files}"
mkdir -p "$HIPFILE_TEST_DIR"
PY="${PYTHON:-python3}"
if ! "$PY" -m venv --help >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq python3 python3-venv python3-pip
fi
