#!/usr/bin/env bash
# Build the ring-controller wheel and the one-file launcher into dist/, and the
# controller image.
#
#   build/build.sh               # wheel; image with Docker if `docker info` succeeds
#   build/build.sh --daemonless  # wheel; images without Docker (build/image.sh)
#   build/build.sh --wheel-only  # wheel
#   IMAGE=registry.example/ring-controller:0.1.0 build/build.sh
#
# The wheel holds ringcontroller, agent, model and ranktable (the daemon and
# the launcher); the image installs it with its runtime dependencies only.
# dist/ring-launch.pyz is the launcher alone: one file, standard library
# only, Python 3.9+ (build/launcher/pyz.py; docs/launcher.md).
# Without a Docker engine the image step is skipped with the reason (use
# --daemonless), and the script still succeeds: the wheel is the artifact CI
# can check. Arguments after --daemonless go to build/image.sh
# (--trainer, --import, ...).
set -euo pipefail

mode=docker
case "${1:-}" in
    --wheel-only) mode=wheel; shift ;;
    --daemonless) mode=daemonless; shift ;;
    "") ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "usage: build/build.sh [--wheel-only | --daemonless [build/image.sh args]]" >&2; exit 2 ;;
esac

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
version="$(sed -n 's/^version *= *//p' setup.cfg)"
image="${IMAGE:-ring-controller:$version}"

step() { printf '\n==> %s\n' "$*" >&2; }

step "building wheel ring-controller $version into dist/ ($("$python" --version))"
mkdir -p dist
rm -f "dist/ring_controller-$version-"*.whl
"$python" -m pip wheel --no-deps --disable-pip-version-check --progress-bar on --wheel-dir dist .
# setuptools stages the build in build/lib and build/bdist.*: not ours to keep.
rm -rf build/lib build/bdist.*
wheel="$(ls "dist/ring_controller-$version-"*.whl)"
step "wheel: $wheel ($(du -h "$wheel" | cut -f1))"
step "launcher: $("$python" build/launcher/pyz.py --out dist/ring-launch.pyz)"

if [[ $mode == wheel ]]; then
    exit 0
fi
if [[ $mode == daemonless ]]; then
    exec build/image.sh --wheel "$wheel" "$@"
fi

if ! command -v docker >/dev/null 2>&1; then
    step "image skipped: no docker client on PATH (build/build.sh --daemonless builds it without Docker)"
    exit 0
fi
if ! reason="$(docker info 2>&1 >/dev/null)"; then
    step "image skipped: no Docker engine answers 'docker info' ($(printf '%s' "$reason" | grep -v '^\s*$' | tail -n 1)); build/build.sh --daemonless builds it without Docker"
    exit 0
fi

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$wheel" dist/ring-launch.pyz "$context/"
mkdir "$context/image"
cp build/image/base-packages.txt build/image/controller.lock "$context/image/"
step "building image $image (context: the wheel, ring-launch.pyz and build/image/'s package lists)"
DOCKER_BUILDKIT=1 docker build --progress=plain -f build/Dockerfile -t "$image" "$context"
step "image: $image"
