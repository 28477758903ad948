#!/usr/bin/env bash
# The PodGroup tests (marker `podgroups`) on a Kubernetes 1.37 control plane
# of their own, results into tests/bench/figures/podgroups-1.37.json.
# Opt-in, not part of .ci/run: CI's cluster is 1.35, which serves no
# PodGroups, and a 1.37 control plane is a cold build of its own (many
# minutes on 2 cores; cached in ~/.cache/ring-devcluster afterwards).
# build/matrix.sh runs the same tests in its 1.37 integration tier
# (RING_DEVCLUSTER_KUBE selects them).
#
#   build/podgroups.sh [--kube 1.37] [pytest args...]
#
# Steps: `ring-devcluster up --kube V` in .state/podgroups-V (its own state
# directory; `ring-devcluster` turns on scheduling.k8s.io/v1beta1 and the
# GenericWorkload gate from 1.37 on), pytest on
# tests/integration/test_controller_podgroups.py and test_server_apis.py
# (the optional-API line), the run recorded (python -m tests.bench.podgroups),
# the cluster stopped. Exit: pytest's.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
kube="1.37"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --kube) kube="$2"; shift 2 ;;
        --kube=*) kube="${1#--kube=}"; shift ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
python="${PYTHON:-python3}"
step() { printf '\n==> %s\n' "$*" >&2; }

[[ -x .venv/bin/python ]] || "$python" -m venv .venv
# shellcheck disable=SC1091
source .venv/bin/activate
step "pip install -e '.[test]' -e build/devcluster"
python -m pip install --quiet --disable-pip-version-check -e '.[test]' -e build/devcluster
step "ring-devcluster tools (kubectl, for kubectl ring's tests)"
ring-devcluster tools >/dev/null

version="$(python -c "import sys; from ringdevcluster import build; print(build.resolve_kube(sys.argv[1]))" "$kube")"
state="$repo/.state/podgroups-$version"
step "ring-devcluster up --kube $version --state-dir $state"
ring-devcluster up -q --kube "$version" --state-dir "$state"
report="$repo/.state/podgroups-$version.xml"
started=$(date +%s)
code=0
RING_DEVCLUSTER_STATE="$state" RING_DEVCLUSTER_KUBE="$version" \
    python -m pytest -q tests/integration/test_controller_podgroups.py tests/integration/test_server_apis.py \
    --junitxml="$report" "$@" || code=$?
python -m tests.bench.podgroups --kube "$version" --junit "$report" --exit-code "$code" \
    --seconds "$(( $(date +%s) - started ))" --command "build/podgroups.sh --kube $kube"
step "ring-devcluster down --state-dir $state"
ring-devcluster down --state-dir "$state" >/dev/null || true
exit "$code"
