#!/bin/sh
# The image's entry point: flags go to pytriton-server; a command runs as given.
#
#   <image> --model-repository=/models ...       pytriton-server --model-repository=/models ...
#   <image> tritonserver --model-store=... ...   tritonserver (= pytriton-server) --model-store=...
#
# The second form is how KServe's Triton runtime and most Triton manifests start the server
# (args: [tritonserver, ...]), so this image drops in for Triton's. `exec` keeps the server
# PID 1, where it receives SIGTERM from `docker stop` and the kubelet.
#
# The model-repository API (load/unload; file: overrides can run code) is off by default: the
# default command serves /models with --model-control-mode=none, which refuses it. With
# PYTRITON_REPOSITORY_API_KEY set, the server started here answers that API only to requests
# carrying the header PYTRITON_REPOSITORY_API_HEADER (default admin-key; over gRPC the metadata
# key triton-grpc-protocol-<header>) with that value (docs/security.md).
set -eu

restricted_flags() {
  if [ -n "${PYTRITON_REPOSITORY_API_KEY:-}" ]; then
    header=${PYTRITON_REPOSITORY_API_HEADER:-admin-key}
    printf '%s\n' "--http-restricted-api=model-repository:$header=$PYTRITON_REPOSITORY_API_KEY"
    printf '%s\n' "--grpc-restricted-protocol=model-repository:$header=$PYTRITON_REPOSITORY_API_KEY"
  fi
}

run_server() {
  server=$1
  shift
  # One flag a line, no word splitting inside a flag (the key may hold spaces).
  old_ifs=$IFS
  IFS='
'
  # shellcheck disable=SC2046  # split on newlines only, by design
  set -- "$@" $(restricted_flags)
  IFS=$old_ifs
  exec "$server" "$@"
}

case "${1:-}" in
  -*) run_server pytriton-server "$@" ;;
  "") run_server pytriton-server ;;
  tritonserver | pytriton-server) run_server "$@" ;;
  *) exec "$@" ;;
esac
