#!/usr/bin/env bash
# The ring-controller demo on a fresh machine: installs what it needs, brings
# up the local control plane, runs the controller and a real two-worker
# TensorFlow job whose TF_CONFIG comes from the controller, then cleans up.
#
#   build/demo.sh [--steps N] [--keep]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export RING_DEVCLUSTER_STATE="${RING_DEVCLUSTER_STATE:-$repo/.state/devcluster}"
python="${PYTHON:-python3}"

step() { printf '==> %s\n' "$*" >&2; }

if [[ ! -x .venv/bin/python ]]; then
    step "creating virtualenv .venv"
    "$python" -m venv .venv
fi
step "pip install -e '.[tensorflow]' (TensorFlow is large: the first run takes a few minutes)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,tensorflow]' -e build/devcluster
exec .venv/bin/python build/demo.py --state-dir "$RING_DEVCLUSTER_STATE" "$@"
