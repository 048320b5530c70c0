#!/bin/sh
# The image's entry point: flags go to pytriton-server; a command runs as given.
#
#   <image> --model-repository=/models ...       pytriton-server --model-repository=/models ...
#   <image> tritonserver --model-store=... ...   tritonserver (= pytriton-server) --model-store=...
#
# The second form is how KServe's Triton runtime and most Triton manifests start the server
# (args: [tritonserver, ...]), so this image drops in for Triton's. `exec` keeps the server
# PID 1, where it receives SIGTERM from `docker stop` and the kubelet.
set -eu
case "${1:-}" in
  -*) exec pytriton-server "$@" ;;
  "") exec pytriton-server ;;
  *) exec "$@" ;;
esac
