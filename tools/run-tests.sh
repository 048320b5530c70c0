#!/usr/bin/env bash
# Installs what the tests need and runs them: the command CI runs (.ci/run) and the README gives.
#   tools/run-tests.sh                 everything
#   tools/run-tests.sh tests/unit -x   extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${PYTRITON_TEST_VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q '.[test]'

# Optional reference tools; the tests that need them skip with the reason when they are absent.
if ! tools/install-perf-analyzer.sh; then
  echo "warning: perf_analyzer could not be installed; its tests will skip" >&2
fi
REAL_TRITON_SETUP=../shared/tools/real-triton/setup.sh
if [ -x "$REAL_TRITON_SETUP" ] || [ -f "$REAL_TRITON_SETUP" ]; then
  if ! bash "$REAL_TRITON_SETUP" >/dev/null 2>&1; then
    echo "warning: the real Triton could not be installed; the differential tests will skip" >&2
  fi
fi

# The src layout keeps the tests on the installed package, compiled extensions included.
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
