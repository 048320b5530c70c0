#!/usr/bin/env bash
# The project's GPU checks, in one go, on a machine with an NVIDIA GPU (a few minutes):
#
#   tools/gpu-checks.sh            install what is missing, run every GPU test, then the
#                                  GPU benchmark (bench.cuda_shm, report under .cache/) and
#                                  the --workers scaling curve on the machine's many cores
#                                  (bench.workers_scaling: 1, 2, 4, 8 workers)
#   tools/gpu-checks.sh -x -k trt  extra arguments go to pytest
#
# Installs the `gpu` extra (onnxruntime-gpu, cupy, tensorrt) only where the machine lacks it,
# keeping what it has (a CUDA build of torch, its own cupy): packages it adds go to their own
# folder ($GPU_SITE), put first on PYTHONPATH, so nothing installed is replaced or removed.
# Offline machines: put the wheels in $WHEELS (default .whl/) and they are installed from there.
# Without the package installed, the compiled extensions are built in place (src/ layout).
# Environment: PYTHON (default python3), GPU_SITE (default .cache/gpu-site), WHEELS,
# BENCH_SECONDS (per benchmark mode, default 3), WORKERS (the worker counts of the scaling
# curve, default 1,2,4,8), WORKERS_CONCURRENCY (default 16,64; "" skips the curve).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
GPU_SITE=${GPU_SITE:-$PWD/.cache/gpu-site}
WHEELS=${WHEELS:-$PWD/.whl}

if ! nvidia-smi -L; then
  echo "gpu-checks: no NVIDIA GPU visible (nvidia-smi failed); nothing to check here" >&2
  exit 1
fi

pip_install() {
  local source=()
  if [ -d "$WHEELS" ]; then
    source=(--no-index --find-links "$WHEELS")
  fi
  "$PYTHON" -m pip install -q --disable-pip-version-check "${source[@]}" "$@"
}

# The server itself: installed, or built in place from this checkout.
if ! "$PYTHON" -c 'import pytriton_core._native.batching' 2>/dev/null; then
  if ! pip_install -e '.[test]'; then
    echo "gpu-checks: pip install -e . failed; building the extensions in place" >&2
    "$PYTHON" setup.py build_ext --inplace -q
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi

# The gpu extra, only what is missing, into its own folder.
missing=()
"$PYTHON" -c 'import onnxruntime as o, sys; sys.exit("CUDAExecutionProvider" not in o.get_available_providers())' \
  2>/dev/null || missing+=("onnxruntime-gpu>=1.17")
"$PYTHON" -c 'import cupy' 2>/dev/null || missing+=("cupy-cuda12x>=13")
"$PYTHON" -c 'import tensorrt' 2>/dev/null || missing+=("tensorrt>=10")
# Tree models on the GPU: XGBoost's CUDA build (the test extra's xgboost-cpu has none).
"$PYTHON" -c 'import sys, xgboost; sys.exit(not xgboost.build_info().get("USE_CUDA"))' \
  2>/dev/null || missing+=("xgboost>=2.1")
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-checks: installing ${missing[*]} into $GPU_SITE"
  if pip_install --target "$GPU_SITE" --upgrade "${missing[@]}"; then
    export PYTHONPATH="$GPU_SITE${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu-checks: could not install ${missing[*]}; the tests that need them skip" >&2
  fi
fi

"$PYTHON" - <<'EOF'
import importlib
for name in ("torch", "onnxruntime", "cupy", "tensorrt", "xgboost"):
    try:
        module = importlib.import_module(name)
        print(f"gpu-checks: {name} {getattr(module, '__version__', '?')}")
    except Exception as exc:  # report, do not stop: its tests skip with the reason
        print(f"gpu-checks: {name} unavailable ({type(exc).__name__}: {exc})")
EOF

# Every GPU test (tests/gpu: CUDA shared memory, the framework backends on CUDA, tree models,
# implicit state kept on the device); -rs prints why any test skipped.
status=0
"$PYTHON" -m pytest -p no:cacheprovider -rs -v tests/gpu "$@" || status=$?

# The GPU benchmark: CUDA shared memory vs system shm vs the socket, into a GPU model.
"$PYTHON" -m bench.cuda_shm --seconds "${BENCH_SECONDS:-3}" || status=$?

# --workers: 1, 2, 4, 8 server processes behind one port (a CPU curve: the GPU machine is
# where there are cores for it). It needs perf_analyzer: installed here if missing (an
# offline machine needs .cache/perf-analyzer brought along), else the curve is skipped, said.
has_perf_analyzer() {
  "$PYTHON" -c 'import sys; from bench.shm_compare import find_perf_analyzer as f; sys.exit(f() is None)'
}
if [ -n "${WORKERS_CONCURRENCY-16,64}" ]; then
  if has_perf_analyzer || { tools/install-perf-analyzer.sh && has_perf_analyzer; }; then
    "$PYTHON" -m bench.workers_scaling --workers "${WORKERS:-1,2,4,8}" \
      --concurrency "${WORKERS_CONCURRENCY-16,64}" \
      --window-ms "$(( ${BENCH_SECONDS:-3} * 1000 ))" || status=$?
  else
    echo "gpu-checks: no perf_analyzer (tools/install-perf-analyzer.sh failed): the --workers curve is not measured" >&2
    status=1
  fi
fi
exit "$status"
