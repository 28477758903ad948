#!/usr/bin/env bash
# The Kubernetes version matrix: test tiers against several releases, results
# into tests/bench/figures/kube-matrix.json and README.md's Supported versions
# table. Opt-in, not part of .ci/run: each release other than the pinned one
# costs a cold build of its control plane (about 9 minutes on 2 cores) and, for
# the workloads tier, of its kubelet and kube-proxy.
#
#   build/matrix.sh [--kube 1.32,1.35,1.37] [--tiers integration[,workloads]]
#                   [--workloads-state DIR] [pytest args...]
#
# --kube: minors (each one's newest patch on the Go module proxy) or full
#   versions, comma-separated (default 1.32,1.35,1.37).
# --tiers: integration (default: tests/integration on a kwok cluster of that
#   release) and/or workloads (tests/workloads: the real Volcano, JobSet and
#   Trainer controllers, the real node, the controller's image as the shipped
#   Deployment). The workloads tier needs the machine's one real node; when
#   another cluster holds it, the tier is recorded as not run, with the reason.
# --workloads-state DIR: run the workloads tier on the running cluster in DIR
#   (the one that holds the node, of the same release; `up` reuses it and it
#   is left running), e.g. under `flock /work/locks/node.lock`.
#
# Per release V (resolved to its full version): `ring-devcluster up --kube V`
# in .state/matrix/V (a state directory of its own; the binaries are cached
# apart per release in ~/.cache/ring-devcluster), pytest with
# RING_DEVCLUSTER_STATE and RING_DEVCLUSTER_KUBE pointing at it, the result
# recorded (python -m tests.bench.matrix record), the cluster stopped (also
# after a failed `up` and when the script is interrupted; a --workloads-state
# cluster is left running). At the end README.md's table is rewritten from the
# JSON; tests/unit/test_matrix.py checks the two agree. Exit 1 when any tier
# that ran failed. Two runs at once (one release each) take turns at .venv and
# the JSON.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
kubes="1.32,1.35,1.37"
tiers="integration"
shared_workloads=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --kube) kubes="$2"; shift 2 ;;
        --kube=*) kubes="${1#--kube=}"; shift ;;
        --tiers) tiers="$2"; shift 2 ;;
        --tiers=*) tiers="${1#--tiers=}"; shift ;;
        --workloads-state) shared_workloads="$2"; shift 2 ;;
        -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
for tier in ${tiers//,/ }; do
    [[ "$tier" == integration || "$tier" == workloads ]] || { echo "unknown tier $tier (integration, workloads)" >&2; exit 2; }
done
command_line="build/matrix.sh --kube $kubes --tiers $tiers${shared_workloads:+ --workloads-state DIR}${*:+ $*}"
python="${PYTHON:-python3}"

step() { printf '\n==> %s\n' "$*" >&2; }

[[ -x .venv/bin/python ]] || "$python" -m venv .venv
# shellcheck disable=SC1091
source .venv/bin/activate
extras="test"
[[ ",$tiers," == *",workloads,"* ]] && extras="test,tensorflow,jax"
mkdir -p .state/matrix
# Two runs at once (one release each) share .venv and the JSON: one writer at a time.
serial() { flock "$repo/.state/matrix/.lock" "$@"; }
step "pip install -e '.[$extras]' -e build/devcluster"
serial python -m pip install --quiet --disable-pip-version-check -e ".[$extras]" -e build/devcluster
step "ring-devcluster tools (helm and kubectl, for the chart and kustomize tests)"
ring-devcluster tools >/dev/null

# Every release's Go modules download beside the first build (nice 19, network-bound).
(
    for spec in ${kubes//,/ }; do
        ring-devcluster build --download-only --kube "$spec" \
            $([[ ",$tiers," == *",workloads,"* ]] && echo --with jobset,volcano,trainer,node,prometheus) || true
    done
) >.state/matrix/download.log 2>&1 &
failed=0
# The cluster this script brought up, stopped when the script ends however it ends (a failed
# `up` leaves its processes running for inspection, and a workloads cluster holds the real node).
ours=""
stop_ours() {
    [[ -n "$ours" ]] || return 0
    step "ring-devcluster down --state-dir $ours"
    ring-devcluster down --state-dir "$ours" >/dev/null || true
    ours=""
}
trap stop_ours EXIT
trap 'exit 130' INT TERM
for spec in ${kubes//,/ }; do
    version="$(python -c "import sys; from ringdevcluster import build; print(build.resolve_kube(sys.argv[1]))" "$spec")"
    for tier in ${tiers//,/ }; do
        state="$repo/.state/matrix/$version"
        addons=()
        if [[ "$tier" == workloads ]]; then
            state="${shared_workloads:-$state-workloads}"
            addons=(--with jobset,volcano,trainer,node,prometheus)
        fi
        step "Kubernetes $version ($spec), $tier tier: ring-devcluster up --kube $version --state-dir $state ${addons[*]}"
        [[ "$tier" == workloads && -n "$shared_workloads" ]] || ours="$state"  # a shared one is not ours to stop
        if ! up_log="$(ring-devcluster up -q --kube "$version" --state-dir "$state" "${addons[@]}" 2>&1 >/dev/null)"; then
            why="$(printf '%s\n' "$up_log" | grep 'error:' | tail -1 | sed 's/^ring-devcluster: error: //')"
            printf '%s\n' "$up_log" | tail -20 >&2
            serial python -m tests.bench.matrix record --kube "$version" --tier "$tier" --command "$command_line" \
                --not-run "ring-devcluster up failed: ${why:-see the log above}"
            [[ "$tier" == workloads && "$why" == *"node"* ]] || failed=1
            stop_ours
            continue
        fi
        report=".state/matrix/$version-$tier.xml"
        started=$(date +%s)
        code=0
        if [[ "$tier" == integration ]]; then
            RING_DEVCLUSTER_STATE="$state" RING_DEVCLUSTER_KUBE="$version" \
                python -m pytest -q tests/integration --junitxml="$report" "$@" || code=$?
        else
            RING_DEVCLUSTER_WORKLOADS_STATE="$state" RING_DEVCLUSTER_KUBE="$version" \
                python -m pytest -q tests/workloads --junitxml="$report" "$@" || code=$?
        fi
        serial python -m tests.bench.matrix record --kube "$version" --tier "$tier" --junit "$report" \
            --exit-code "$code" --seconds "$(( $(date +%s) - started ))" --command "$command_line"
        [[ $code -eq 0 ]] || failed=1
        stop_ours
    done
done

step "README.md's Supported versions table from tests/bench/figures/kube-matrix.json"
serial python -m tests.bench.matrix readme
serial python -m tests.bench.matrix readme --check
exit "$failed"
