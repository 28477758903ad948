#!/usr/bin/env bash
# Chaos runs with figures (issue 13): the real controller against the real
# local control plane (kwok nodes, loopback only) while faults are injected.
#
#   build/chaos.sh                      # every scenario, full size (about 15-25 min on 2 cores)
#   build/chaos.sh --quick --seed 7     # the short seeded version CI runs (a few minutes)
#   build/chaos.sh --json out.json --only controller-sigkill,forced-410
#
# Scenarios: controller-sigkill, apiserver-restarts, forced-410,
# leader-failover, rbac-denied, events-flood (see tests/chaos/run.py).
# Prints a table (scenario, runs, faults, specs checked, wrong, stale, epoch
# regressions, non-leader writes, converge s) on stdout, progress on stderr;
# --json writes {"scenarios": [{name, runs, faults, specs_checked,
# wrong_specs, stale_specs, epoch_regressions, non_leader_writes,
# converge_s, notes}]}. Exit status 1 if any scenario published a wrong,
# stale or regressed spec, let a non-leader write, or did not converge.
#
#   build/chaos.sh --node --json node.json                 # faults on the real node while TensorFlow trains
#   build/chaos.sh --node --quick --only pod-evicted,container-restart
#
# Node scenarios (--node, tests/chaos/node.py): pod-evicted,
# container-restart, kubelet-restart, containerd-restart, node-reboot,
# api-unreachable-from-pods; a 3-worker TensorFlow job (ring-launch
# --supervise, checkpoints) per scenario, on the workloads cluster's real node
# ($RING_DEVCLUSTER_WORKLOADS_STATE; it must be up). --json writes per
# scenario faults, wrong, stale, mixed_epochs, recovered_s, in_sync.
#
# It uses its own dev cluster ($RING_CHAOS_STATE, default .state/chaos),
# never the tests' one: it kills that cluster's API server and etcd. Stop it
# with `ring-devcluster down --state-dir .state/chaos`.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"

if [[ ! -x .venv/bin/python ]]; then
    echo "chaos: creating virtualenv .venv" >&2
    "$python" -m venv .venv
fi
if [[ ! -x .venv/bin/ring-controller || ! -x .venv/bin/ring-devcluster ]]; then
    echo "chaos: installing the project and the dev-cluster tool into .venv" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' -e build/devcluster
fi
exec .venv/bin/python -m tests.chaos "$@"
