#!/usr/bin/env bash
# Installs what tests/deploy checks docker/ and deploy/ with. Idempotent and quiet when all is
# there; the tests call it, so CI and developers need no step of their own.
#
#   tools/install-deploy-tools.sh            the linters and validators: pyproject.toml's `deploy`
#                                            extra in a venv of its own ($PYTRITON_DEPLOY_VENV,
#                                            default .cache/deploy-venv; the project is not
#                                            installed there)
#   tools/install-deploy-tools.sh --podman   also podman, runc, the CNI plugins and debootstrap
#                                            from the system's apt (root only), for the image test
#
# Exits non-zero with the reason on stderr when something cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${PYTRITON_DEPLOY_VENV:-.cache/deploy-venv}
PYTHON=${PYTHON:-python3}

# The `deploy` extra, one requirement a line: the single list of these tools and their pins.
requirements=$("$PYTHON" - <<'EOF'
import re

with open("pyproject.toml") as f:
    block = re.search(r"^deploy = \[(.*?)^\]", f.read(), re.MULTILINE | re.DOTALL)
print("\n".join(re.findall(r'"([^"]+)"', block.group(1))))
EOF
)

# One installer at a time: test sessions running side by side share the venv and apt.
mkdir -p "$(dirname "$VENV")"
exec 9> "$VENV.lock"
flock 9

stamp="$VENV/.deploy-requirements"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  echo "installing the deploy tools into $VENV" >&2
  "$PYTHON" -m venv "$VENV"
  # shellcheck disable=SC2086  # one requirement a line, none with spaces
  if ! "$VENV/bin/python" -m pip install -q $requirements > "$VENV/install.log" 2>&1; then
    cat "$VENV/install.log" >&2
    exit 1
  fi
  printf '%s' "$requirements" > "$stamp"
fi

if [ "${1:-}" = "--podman" ]; then
  packages=(podman runc containernetworking-plugins debootstrap uidmap slirp4netns conmon iptables)
  missing=()
  for tool in podman runc debootstrap iptables; do
    command -v "$tool" > /dev/null || missing+=("$tool")
  done
  [ -x /usr/lib/cni/bridge ] || [ -x /usr/libexec/cni/bridge ] || missing+=(cni-bridge)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get > /dev/null; then
      echo "podman tools missing (${missing[*]}) and apt-get as root is not available" >&2
      exit 2
    fi
    echo "installing ${packages[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q > /dev/null
    apt-get install -y -q --no-install-recommends "${packages[@]}" > /dev/null
  fi
fi
