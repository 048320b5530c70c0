#!/usr/bin/env bash
# Installs what the tests need and runs them: the command CI runs (.ci/run) and the README gives.
#   tools/run-tests.sh                 everything, and the unit tests once more on Python 3.10
#   tools/run-tests.sh tests/unit -x   extra arguments go to pytest (the 3.10 run is skipped)
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

# The oldest Python the package declares (requires-python): the unit tests once more, in a
# venv of their own with only what they need (the unit extra), so that CI stays fast.
# PYTRITON_OLDEST_PYTHON names the interpreter; else pyenv's or PATH's python3.10.
if [ $# -eq 0 ]; then
  OLDEST=${PYTRITON_OLDEST_PYTHON:-}
  if [ -z "$OLDEST" ]; then
    for candidate in "$HOME"/.pyenv/versions/3.10*/bin/python "$(command -v python3.10 || true)"; do
      if [ -x "$candidate" ]; then OLDEST=$candidate; break; fi
    done
  fi
  if [ -n "$OLDEST" ]; then
    VENV_OLDEST=${PYTRITON_TEST_VENV_OLDEST:-.venv310}
    [ -x "$VENV_OLDEST/bin/python" ] || "$OLDEST" -m venv "$VENV_OLDEST"
    "$VENV_OLDEST/bin/python" -m pip install -q --upgrade pip
    "$VENV_OLDEST/bin/python" -m pip install -q '.[unit]'
    "$VENV_OLDEST/bin/python" -m pytest -p no:cacheprovider -q tests/unit
  else
    echo "warning: no Python 3.10 found; the unit tests run on $("$VENV/bin/python" -V) only" >&2
  fi
fi

# Model Analyzer's profile (remote mode) against this server, one config: a few minutes, so a
# script rather than a test (docs/model-management.md); it runs before pytest so that pytest's
# summary stays the last line. It needs perf_analyzer and installs Model Analyzer into a venv
# of its own (exit 3 when that install fails: a warning, as for the other reference tools);
# PYTRITON_SKIP_MODEL_ANALYZER=1 leaves it out.
status=0
if [ $# -eq 0 ] && [ "${PYTRITON_SKIP_MODEL_ANALYZER:-0}" != 1 ]; then
  PA=${PERF_ANALYZER:-.cache/perf-analyzer/bin/perf_analyzer}
  MA_LOG=${TMPDIR:-/tmp}/pytriton-model-analyzer.log
  if [ -x "$PA" ]; then
    ma_status=0
    MA_QUICK=1 PERF_ANALYZER=$PA PYTHON="$VENV/bin/python" tools/model-analyzer-remote.sh \
      >"$MA_LOG" 2>&1 || ma_status=$?
    if [ $ma_status -eq 0 ]; then
      grep -h "Model Analyzer's reports for" "$MA_LOG" || true
    elif [ $ma_status -eq 3 ]; then
      echo "warning: Model Analyzer could not be installed; its profile is skipped" >&2
    else
      echo "Model Analyzer's profile failed (its log: $MA_LOG):" >&2
      tail -30 "$MA_LOG" >&2
      status=1
    fi
  else
    echo "warning: no perf_analyzer: Model Analyzer's profile is skipped" >&2
  fi
fi

# The src layout keeps the tests on the installed package, compiled extensions included.
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@" || exit $?
exit $status
