#!/usr/bin/env bash
# Runs Triton's own python_backend BLS examples, unchanged, against pytriton-core:
# bls/sync_client.py, bls/async_client.py, bls_decoupled/sync_client.py and
# bls_decoupled/async_client.py, each against its own models (add_sub, pytorch, bls_sync,
# bls_async, square_int32, bls_decoupled_sync, bls_decoupled_async).
#
#   tools/python-backend-examples.sh PYTHON_BACKEND_GIT_DIR
#
# PYTHON_BACKEND_GIT_DIR is a clone (or bare mirror) of
# github.com/triton-inference-server/python_backend. The examples' clients talk to
# localhost:8000, so that port must be free. Needs the project's .venv (tools/run-tests.sh
# makes it), with torch for the examples' "pytorch" model.
set -euo pipefail
GIT_DIR=${1:?usage: $0 PYTHON_BACKEND_GIT_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d)
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT

show() { git --git-dir="$GIT_DIR" show "HEAD:examples/$1" > "$2"; }
model() {  # model name, its model.py and config.pbtxt in the examples
  mkdir -p "$WORK/models/$1/1"
  show "$2" "$WORK/models/$1/1/model.py"
  show "$3" "$WORK/models/$1/config.pbtxt"
}
model add_sub add_sub/model.py add_sub/config.pbtxt
model pytorch pytorch/model.py pytorch/config.pbtxt
model bls_sync bls/sync_model.py bls/sync_config.pbtxt
model bls_async bls/async_model.py bls/async_config.pbtxt
model square_int32 decoupled/square_model.py decoupled/square_config.pbtxt
model bls_decoupled_sync bls_decoupled/sync_model.py bls_decoupled/sync_config.pbtxt
model bls_decoupled_async bls_decoupled/async_model.py bls_decoupled/async_config.pbtxt
for client in bls/sync_client.py bls/async_client.py bls_decoupled/sync_client.py \
  bls_decoupled/async_client.py; do
  show "$client" "$WORK/$(echo "$client" | tr / _)"
done

"$PYTHON" -m pytriton_core --model-repository="$WORK/models" --http-port=8000 \
  --allow-grpc=false --allow-metrics=false > "$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 120); do
  curl -sf localhost:8000/v2/health/ready > /dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 0.5
done
status=0
for client in bls_sync_client.py bls_async_client.py bls_decoupled_sync_client.py \
  bls_decoupled_async_client.py; do
  echo "== $client"
  if ! (cd "$WORK" && "$PYTHON" "$client"); then status=1; fi
done
exit $status
