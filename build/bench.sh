#!/usr/bin/env bash
# Benchmark ring-controller on the real local control plane (issue 6).
#
#   build/bench.sh --jobs 200 --pods 8 --json out.json
#   build/bench.sh --jobs 50 --pods 8 --kube 1.32 --json out.json
#   build/bench.sh --jobs 1000 --pods 8 --jobsets 500 --json out.json
#   build/bench.sh --jobs 1 --pods 1024 --devices 8
#   build/bench.sh --jobs 20 --pods 8 --churn 60
#   build/bench.sh --jobs 200 --pods 8 --compare old.json --check-targets
#   build/bench.sh --vs-dns [--workers 2,4,8] [--repeats 5] [--json OUT] [--plot OUT.png]
#   build/bench.sh --delivery [--modes file+touch,file,api] [--repeats 10] [--json OUT]
#   build/bench.sh --launcher [--repeats 5] [--concurrency 1,8] [--wait 60] [--json OUT]
#   build/bench.sh --superpod [--rows a3-24x16,a3-1024x16,a5-1024x8] [--json OUT]
#   build/bench.sh --kinds job,sts,lws [--jobs 50] [--pods 8] [--json OUT]
#
# --vs-dns runs tests/bench/vsdns.py instead: ring-controller against the
# DNS-probing baseline (build/examples/baseline), the same TrainJobs on the
# real node of the workloads cluster (ring-devcluster up --with
# jobset,volcano,trainer,node); --plot installs matplotlib when missing.
# --delivery runs tests/bench/delivery.py: spec completed -> TF_CONFIG in a
# container on the real node, per delivery mode (same cluster).
# --launcher runs tests/bench/launcher.py: launcher start -> spec observed
# (file and API mode, 1 and 8 at once, wall and CPU-s per launcher) and the
# file-mode wait's CPU and swap -> exit latency, the launcher before
# (merge-base with main) and after (dist/ring-launch.pyz); the tests' cluster.
# --superpod runs tests/bench/superpod.py: rank tables at super-pod scale
# (384 to 16,384 NPUs), one job per row, on kwok nodes ($RING_DEVCLUSTER_STATE
# or .state/bench).
# --kinds runs tests/bench/kinds.py: the spec latency of Indexed Jobs,
# StatefulSets and LeaderWorkerSets, their pods made by the real Job and
# StatefulSet controllers (LWS pods by the bench), on kwok nodes; `pg` adds
# PodGroups (pods by the bench, ganged by the real scheduler; with
# RING_DEVCLUSTER_KUBE=1.37, whose control plane serves them).
#
# --kube VERSION (1.32, v1.32.13) runs the bench on that Kubernetes release, in
# the state directory .state/bench-VERSION unless --state-dir says otherwise
# (with --delivery: the release of the node's cluster); the result records the
# release it ran on.
#
# Uses the virtualenv .venv (created, and the project with its test extra and
# the dev-cluster tool build/devcluster installed into it, when missing),
# brings up or reuses the cluster in --state-dir (default
# .state/bench; stop it with `ring-devcluster down --state-dir .state/bench`),
# and runs `python -m tests.bench.bench` with every argument given here.
# The table goes to stdout, progress to stderr; --help lists the flags.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"

if [[ ! -x .venv/bin/python ]]; then
    echo "bench: creating virtualenv .venv" >&2
    "$python" -m venv .venv
fi
if [[ ! -x .venv/bin/ring-controller || ! -x .venv/bin/ring-devcluster ]]; then
    # Every mode brings up a dev cluster: the project and the dev-cluster tool (ringdevcluster).
    echo "bench: installing the project and the dev-cluster tool into .venv" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' -e build/devcluster
fi
for arg in "$@"; do
    if [[ "$arg" == "--plot" || "$arg" == --plot=* ]]; then
        .venv/bin/python -c 'import matplotlib' 2>/dev/null || .venv/bin/python -m pip install --quiet --disable-pip-version-check matplotlib
    fi
done
for arg in "$@"; do
    if [[ "$arg" == "--vs-dns" ]]; then
        exec .venv/bin/python -m tests.bench.vsdns "$@"
    fi
    if [[ "$arg" == "--launcher" ]]; then
        exec .venv/bin/python -m tests.bench.launcher "$@"
    fi
    if [[ "$arg" == "--delivery" ]]; then
        exec .venv/bin/python -m tests.bench.delivery "$@"
    fi
    if [[ "$arg" == "--superpod" ]]; then
        exec .venv/bin/python -m tests.bench.superpod "$@"
    fi
    if [[ "$arg" == --kinds* ]]; then
        exec .venv/bin/python -m tests.bench.kinds "$@"
    fi
done
exec .venv/bin/python -m tests.bench.bench "$@"
