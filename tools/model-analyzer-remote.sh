#!/usr/bin/env bash
# Runs Triton's Model Analyzer (remote launch mode) against pytriton-core: a check that it
# runs to the end and writes its reports. It takes several minutes on a 2-core machine, so
# it is a script, not a test.
#
#   tools/model-analyzer-remote.sh [MODEL]      (default: identity_fp32 of the bundled examples)
#   MA_QUICK=1 tools/model-analyzer-remote.sh   one config (the model's own) at concurrency 1,
#                                               then checks the reports: what CI runs
#
# Model Analyzer goes into its own venv, outside the project's (its tritonclient pin differs):
# $MA_VENV, default ~/.cache/pytriton-model-analyzer. It needs perf_analyzer: $PERF_ANALYZER,
# else .cache/perf-analyzer (tools/install-perf-analyzer.sh). The server is started here, in
# EXPLICIT mode, on free loopback ports; Model Analyzer reloads the model with each config
# it tries (CPU instances only: cpu_only), then writes its reports to $OUT (default: a new
# temporary folder), whose path the script prints.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODEL=${1:-identity_fp32}
MA_VENV=${MA_VENV:-$HOME/.cache/pytriton-model-analyzer}
PERF_ANALYZER=${PERF_ANALYZER:-$ROOT/.cache/perf-analyzer/bin/perf_analyzer}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
OUT=${OUT:-$(mktemp -d -t model-analyzer-XXXXXX)}

[ -x "$PERF_ANALYZER" ] || { echo "no perf_analyzer at $PERF_ANALYZER (tools/install-perf-analyzer.sh)" >&2; exit 2; }
if [ ! -x "$MA_VENV/bin/model-analyzer" ]; then
  { python3 -m venv "$MA_VENV" && "$MA_VENV/bin/pip" install -q triton-model-analyzer; } || {
    echo "could not install triton-model-analyzer into $MA_VENV" >&2
    rm -rf "$MA_VENV"
    exit 3
  }
fi

mkdir -p "$OUT/repository" "$OUT/export"
cp -r "$ROOT/examples/model_repository/$MODEL" "$OUT/repository/"
read -r HTTP GRPC METRICS < <("$PYTHON" -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')

"$PYTHON" -m pytriton_core --model-repository="$OUT/repository" --model-control-mode=explicit \
  --load-model="$MODEL" --http-address=127.0.0.1 --grpc-address=127.0.0.1 \
  --metrics-address=127.0.0.1 --http-port="$HTTP" --grpc-port="$GRPC" \
  --metrics-port="$METRICS" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  "$PYTHON" -c "import http.client as h, sys; c = h.HTTPConnection('127.0.0.1', $HTTP, timeout=1)
try:
    c.request('GET', '/v2/health/ready'); sys.exit(c.getresponse().status != 200)
except OSError:
    sys.exit(1)" && break
  sleep 0.2
done

if [ "${MA_QUICK:-0}" = 1 ]; then
  SEARCH="run_config_search_disable: true"
  PARAMETERS="    parameters:
      concurrency: [1]"
else
  SEARCH="run_config_search_max_concurrency: 2
run_config_search_max_instance_count: 2
run_config_search_max_model_batch_size: 2"
  PARAMETERS=""
fi
cat >"$OUT/config.yaml" <<EOF
model_repository: $OUT/repository
triton_launch_mode: remote
client_protocol: grpc
collect_cpu_metrics: true
$SEARCH
override_output_model_repository: true
profile_models:
  $MODEL:
    cpu_only: true
$PARAMETERS
    perf_analyzer_flags:
      shape: INPUT0:16
EOF

PATH="$(dirname "$PERF_ANALYZER"):$PATH" "$MA_VENV/bin/model-analyzer" profile -f "$OUT/config.yaml" \
  --triton-http-endpoint "127.0.0.1:$HTTP" --triton-grpc-endpoint "127.0.0.1:$GRPC" \
  --triton-metrics-url "http://127.0.0.1:$METRICS/metrics" \
  --output-model-repository-path "$OUT/output-models" --checkpoint-directory "$OUT/checkpoints" \
  --export-path "$OUT/export" --perf-analyzer-path "$PERF_ANALYZER" | tee "$OUT/model-analyzer.log"
echo "Model Analyzer's reports and logs: $OUT"

if [ "${MA_QUICK:-0}" = 1 ]; then
  # The reports a profile writes: the summary, the detailed report of the config, and the
  # measurements, with a row for the model's config.
  for report in "reports/summaries/$MODEL/result_summary.html" \
    "reports/detailed/${MODEL}_config_default/detailed_report.html" \
    "results/metrics-model-inference.csv"; do
    [ -s "$OUT/export/$report" ] || { echo "Model Analyzer wrote no $report" >&2; exit 1; }
  done
  grep -q "^$MODEL,.*${MODEL}_config_default" "$OUT/export/results/metrics-model-inference.csv" || {
    echo "Model Analyzer measured nothing for $MODEL" >&2
    exit 1
  }
  echo "Model Analyzer's reports for $MODEL: written"
fi
