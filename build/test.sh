#!/usr/bin/env bash
# Install everything the tests need and run them all, against a real local
# Kubernetes control plane (ring-devcluster).
#
#   build/test.sh [--with torch] [--with lws] [--without kueue] [pytest args...]
#   build/test.sh --help          # this text
#
# --with torch adds tests/workloads/test_torch_gloo.py (a gloo all-reduce over
# 3 pods of a stock PyTorch image, tests/support/torchimage.py, over IPv4 and
# over IPv6): PyTorch from PyPI brings 2.8 GB of CUDA wheels, so it is not
# part of a default run.
# tests/kueue (jobs admitted, preempted and placed by a real Kueue) run on a
# kwok cluster of their own: `ring-devcluster up --with jobset,trainer,kueue`
# in $RING_DEVCLUSTER_KUEUE_STATE, default $RING_DEVCLUSTER_STATE-kueue (Kueue's
# build adds about 2 minutes cold, its tests under one); --without kueue
# leaves them out (RING_TEST_KUEUE=0). build/kueue.sh runs that tier alone.
# --with lws adds tests/workloads/test_lws_controller.py (LeaderWorkerSets run
# by the real LWS controller, built from the Go module proxy: minutes cold) on
# a cluster of its own, `ring-devcluster up --with lws` in
# $RING_DEVCLUSTER_LWS_STATE (default $RING_DEVCLUSTER_STATE-lws).
#
# Steps: create/reuse the virtualenv .venv; pip install the package with its
# test, tensorflow and jax extras, and the dev-cluster tool (build/devcluster); `ring-devcluster up` (builds the control-plane
# binaries from the Go module proxy on first use, cached in
# ~/.cache/ring-devcluster, then starts or reuses the cluster whose state lives
# in $RING_DEVCLUSTER_STATE, default .state/devcluster); a second cluster with
# the real workload controllers, `ring-devcluster up --with
# jobset,volcano,trainer` in $RING_DEVCLUSTER_WORKLOADS_STATE (default
# $RING_DEVCLUSTER_STATE-workloads), for tests/workloads/ (those controllers act on every JobSet and
# Volcano Job, so they cannot share the cluster of the tests that play them
# by hand; their cold build adds about 15 minutes on 2 cores), which also gets
# the machine's one real node (`--with node`: kubelet, kube-proxy, containerd,
# CoreDNS; `up` apt-installs containerd, runc, the CNI plugins, iptables and
# conntrack when missing; this script installs busybox-static, the tests'
# image) and a Prometheus scraping the controller pods on that node
# (`--with prometheus`, built from the Go module proxy with promtool, which
# the alert rules' unit tests run; the build is checked before pytest); the
# client tools helm and kubectl (`ring-devcluster tools`, for the Helm chart
# and the kustomize base; a few minutes cold); pytest over
# tests/ (unit, tools, integration, e2e, workloads: a skipped test fails the run); the short seeded chaos run (build/chaos.sh
# --quick, on a third cluster of its own, $RING_CHAOS_STATE, default
# .state/chaos, whose API server and etcd it kills); the quick node chaos run
# (build/chaos.sh --node --quick --only pod-evicted: a worker of a real
# TensorFlow job on the real node evicted; about 2 minutes); ruff; the import-linter
# contracts; mypy (strict, as pyproject.toml configures it).
# The clusters are left running for the next run; stop them with
# `ring-devcluster down --state-dir DIR` (.ci/run does).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export RING_DEVCLUSTER_STATE="${RING_DEVCLUSTER_STATE:-$repo/.state/devcluster}"
export RING_DEVCLUSTER_WORKLOADS_STATE="${RING_DEVCLUSTER_WORKLOADS_STATE:-$RING_DEVCLUSTER_STATE-workloads}"
python="${PYTHON:-python3}"
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
    exit 0
fi
export RING_DEVCLUSTER_KUEUE_STATE="${RING_DEVCLUSTER_KUEUE_STATE:-$RING_DEVCLUSTER_STATE-kueue}"
export RING_DEVCLUSTER_LWS_STATE="${RING_DEVCLUSTER_LWS_STATE:-$RING_DEVCLUSTER_STATE-lws}"
export RING_TEST_KUEUE="${RING_TEST_KUEUE:-1}"
while [[ ( "${1:-}" == "--with" && ( "${2:-}" == "torch" || "${2:-}" == "kueue" || "${2:-}" == "lws" ) ) \
    || ( "${1:-}" == "--without" && "${2:-}" == "kueue" ) ]]; do
    [[ "$1 $2" == "--with torch" ]] && export RING_TEST_TORCH=1
    [[ "$1 $2" == "--with kueue" ]] && export RING_TEST_KUEUE=1  # the default; accepted as before
    [[ "$1 $2" == "--without kueue" ]] && export RING_TEST_KUEUE=0
    [[ "$1 $2" == "--with lws" ]] && export RING_TEST_LWS=1
    shift 2
done
kueue_build=""
[[ "$RING_TEST_KUEUE" == 1 ]] && kueue_build=",kueue"

# Each step ends with a line of how long it took and the total so far
# (CI's clock: the cold figure per step comes from these lines).
started_all=$SECONDS
step_name=""
step() {
    local now=$SECONDS
    if [[ -n "$step_name" ]]; then
        printf '==> took %ds (%dm%02ds in all): %s\n' $((now - started_step)) $(((now - started_all) / 60)) \
            $(((now - started_all) % 60)) "${step_name:0:60}" >&2
    fi
    step_name="$*"
    started_step=$now
    printf '\n==> %s\n' "$*" >&2
}

if [[ ! -x .venv/bin/python ]]; then
    step "creating virtualenv .venv ($("$python" --version))"
    "$python" -m venv .venv
else
    step "reusing virtualenv .venv ($(.venv/bin/python --version))"
fi
# shellcheck disable=SC1091
source .venv/bin/activate

step "pip install -e '.[test,tensorflow,jax]' -e build/devcluster (the dev-cluster tool)"
python -m pip install --quiet --disable-pip-version-check --upgrade pip
python -m pip install --quiet --disable-pip-version-check -e '.[test,tensorflow,jax]' -e build/devcluster

step "ring-devcluster up (state: $RING_DEVCLUSTER_STATE)"
command -v go >/dev/null || echo "note: no 'go' on PATH; fine only if the binaries are already cached" >&2
# Beside the first builds: download the Go modules of every later one (go
# build downloads all of a module's before it compiles any, which on a fresh
# machine is every module). Network, not CPU: nice 19.
ring-devcluster build --download-only --with "jobset,volcano,trainer,node,prometheus$kueue_build" \
    >"${TMPDIR:-/tmp}/ring-devcluster-download.log" 2>&1 &
download_pid=$!
ring-devcluster up --state-dir "$RING_DEVCLUSTER_STATE"

step "ring-devcluster tools (helm and kubectl for the chart and kustomize tests; built from the Go module proxy once, cached)"
ring-devcluster tools

if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' \
    && [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    step "apt-get install busybox-static (the real node's test image)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
fi

step "ring-devcluster up --with jobset,volcano,trainer,node,prometheus (state: $RING_DEVCLUSTER_WORKLOADS_STATE)"
ring-devcluster up --state-dir "$RING_DEVCLUSTER_WORKLOADS_STATE" --with jobset,volcano,trainer,node,prometheus

step "ring-devcluster build --with prometheus (promtool for tests/tools/test_alert_rules.py; cached: instant)"
ring-devcluster build --with prometheus

if [[ "${RING_TEST_KUEUE:-}" == 1 ]]; then
    step "ring-devcluster up --with jobset,trainer,kueue (state: $RING_DEVCLUSTER_KUEUE_STATE)"
    ring-devcluster up --state-dir "$RING_DEVCLUSTER_KUEUE_STATE" --with jobset,trainer,kueue
fi
if [[ "${RING_TEST_LWS:-}" == 1 ]]; then
    step "ring-devcluster up --with lws (state: $RING_DEVCLUSTER_LWS_STATE; the LWS controller, built once, cached)"
    ring-devcluster up --state-dir "$RING_DEVCLUSTER_LWS_STATE" --with lws
fi

wait "$download_pid" || true  # long done by now; its modules are in place either way

step "pytest tests $*"
python -m pytest -v tests "$@"

step "build/chaos.sh --quick --seed 13 (its own cluster: \$RING_CHAOS_STATE, default .state/chaos)"
build/chaos.sh --quick --seed 13 --json "${RING_CHAOS_JSON:-.state/chaos-quick.json}"

step "build/chaos.sh --node --quick --only pod-evicted (a TensorFlow job on the real node, a worker evicted; about 2 minutes)"
build/chaos.sh --node --quick --only pod-evicted --json "${RING_CHAOS_NODE_JSON:-.state/chaos-node-quick.json}"

step "ruff check and ruff format --check (configured in pyproject.toml)"
ruff check .
ruff format --check .

step "lint-imports (contracts in setup.cfg: the layers, no client below the daemon, one HTTP module)"
lint-imports

step "mypy (strict, on ringcontroller agent model ranktable: configured in pyproject.toml)"
python -m mypy

step "all tests passed"
