#!/usr/bin/env bash
# Benchmark ring-controller on the real local control plane (issue 6).
#
#   build/bench.sh --jobs 200 --pods 8 --json out.json
#   build/bench.sh --jobs 1 --pods 1024 --devices 8
#   build/bench.sh --jobs 20 --pods 8 --churn 60
#   build/bench.sh --jobs 200 --pods 8 --compare old.json --check-targets
#
# Uses the virtualenv .venv (created and the project installed into it when
# missing), brings up or reuses the cluster in --state-dir (default
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
if [[ ! -x .venv/bin/ring-controller ]]; then
    echo "bench: installing the project into .venv" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
fi
exec .venv/bin/python -m tests.bench.bench "$@"
