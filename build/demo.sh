#!/usr/bin/env bash
# The ring-controller demo on a fresh machine: installs what it needs, brings
# up the local control plane, runs the controller and a real two-worker
# TensorFlow job whose TF_CONFIG comes from the controller, then cleans up.
#
#   build/demo.sh [--steps N] [--keep]
#
# --steps N   training steps per worker (default 20)
# --keep      leave the job, its namespace and the controller afterwards
#
# On a machine that can run the real node (root, cgroups) it deploys the
# controller from its image with the shipped manifests and trains on the real
# node (build/demo_node.py); elsewhere it says why and runs the kwok demo.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export RING_DEVCLUSTER_STATE="${RING_DEVCLUSTER_STATE:-$repo/.state/devcluster}"
python="${PYTHON:-python3}"

step() { printf '==> %s\n' "$*" >&2; }
for arg in "$@"; do
    if [[ "$arg" == "--help" || "$arg" == "-h" ]]; then
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
        exit 0
    fi
done

if [[ ! -x .venv/bin/python ]]; then
    step "creating virtualenv .venv"
    "$python" -m venv .venv
fi
step "pip install -e '.[tensorflow]' (TensorFlow is large: the first run takes a few minutes)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,tensorflow]' -e build/devcluster
# The real thing where this machine can run the dev cluster's real node (root,
# cgroups): the shipped controller from its image, a TensorFlow job in real
# containers. Elsewhere the kwok demo (test processes play the containers).
if reason="$(.venv/bin/python -c 'from ringdevcluster import node; node.check_host()' 2>&1)"; then
    step "real node available: demo with the deployed controller and real containers (build/demo_node.py)"
    exec .venv/bin/python build/demo_node.py "$@"
fi
step "no real node here ($(printf '%s' "$reason" | tail -n 1)); running the kwok demo (build/demo.py)"
exec .venv/bin/python build/demo.py --state-dir "$RING_DEVCLUSTER_STATE" "$@"
