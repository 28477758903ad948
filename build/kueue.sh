#!/usr/bin/env bash
# The Kueue tier: jobs that a real Kueue (v0.19.2, built from the Go module
# proxy) admits, preempts and places, in front of the real JobSet, Job and
# Trainer controllers, on a kwok cluster of its own (tests/kueue, marker
# kueue). Opt-in, not part of .ci/run: Kueue's cold build and this cluster do
# not fit CI's budget; the latest results are in tests/bench/figures/kueue.json.
#
#   build/kueue.sh [--record] [--keep] [pytest args...]
#
# --record: write the results (each test's outcome and time, the build, up
#   and test times, the versions, the date) into tests/bench/figures/kueue.json.
# --keep: leave the cluster running (default: stopped at the end).
#
# Steps: the virtualenv .venv with '.[test]' and the dev-cluster tool;
# `ring-devcluster build --with jobset,trainer,kueue` (what is not cached is
# built from the Go module proxy; $RING_GO_BUILD_PREFIX, e.g. `flock
# /tmp/go.lock nice -n 10`, is put in front of that command on a shared
# machine); `ring-devcluster up --with jobset,trainer,kueue` in
# $RING_DEVCLUSTER_KUEUE_STATE (default .state/devcluster-kueue); pytest
# tests/kueue with RING_TEST_KUEUE=1; the cluster stopped. `build/test.sh`
# runs the same tests within the whole suite.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
record=0
keep=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --record) record=1; shift ;;
        --keep) keep=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) break ;;
    esac
done
command_line="build/kueue.sh${*:+ $*}"
[[ $record -eq 1 ]] && command_line="build/kueue.sh --record${*:+ $*}"
export RING_DEVCLUSTER_STATE="${RING_DEVCLUSTER_STATE:-$repo/.state/devcluster}"
export RING_DEVCLUSTER_KUEUE_STATE="${RING_DEVCLUSTER_KUEUE_STATE:-$RING_DEVCLUSTER_STATE-kueue}"
python="${PYTHON:-python3}"
addons="jobset,trainer,kueue"

step() { printf '\n==> %s\n' "$*" >&2; }

[[ -x .venv/bin/python ]] || "$python" -m venv .venv
# shellcheck disable=SC1091
source .venv/bin/activate
step "pip install -e '.[test]' -e build/devcluster"
python -m pip install --quiet --disable-pip-version-check -e '.[test]' -e build/devcluster

mkdir -p .state
build_log=".state/kueue-build.log"
step "${RING_GO_BUILD_PREFIX:+$RING_GO_BUILD_PREFIX }ring-devcluster build --with $addons (cached after the first run)"
started=$(date +%s)
# shellcheck disable=SC2086
${RING_GO_BUILD_PREFIX:-} ring-devcluster build --with "$addons" 2>&1 | tee "$build_log" >&2
build_seconds=$(( $(date +%s) - started ))

step "ring-devcluster up --with $addons (state: $RING_DEVCLUSTER_KUEUE_STATE)"
started=$(date +%s)
ring-devcluster up -q --state-dir "$RING_DEVCLUSTER_KUEUE_STATE" --with "$addons" >/dev/null
up_seconds=$(( $(date +%s) - started ))
stop_cluster() {
    if [[ $keep -eq 0 ]]; then
        step "ring-devcluster down --state-dir $RING_DEVCLUSTER_KUEUE_STATE"
        ring-devcluster down --state-dir "$RING_DEVCLUSTER_KUEUE_STATE" >/dev/null || true
    fi
}
trap stop_cluster EXIT

step "pytest tests/kueue (RING_TEST_KUEUE=1)"
report=".state/kueue.xml"
started=$(date +%s)
code=0
RING_TEST_KUEUE=1 python -m pytest -v tests/kueue --junitxml="$report" "$@" || code=$?
tests_seconds=$(( $(date +%s) - started ))
versions="$(python -c 'import json, sys; print(",".join(f"{k}={v}" for k, v in json.load(open(sys.argv[1]))["versions"].items()))' \
    "$RING_DEVCLUSTER_KUEUE_STATE/state.json")"
if [[ $record -eq 1 ]]; then
    python -m tests.bench.kueue record --junit "$report" --exit-code "$code" --build-log "$build_log" \
        --build-seconds "$build_seconds" --up-seconds "$up_seconds" --tests-seconds "$tests_seconds" \
        --versions "$versions" --command "$command_line"
fi
step "build ${build_seconds}s, up ${up_seconds}s, tests ${tests_seconds}s (pytest exit $code)"
exit "$code"
