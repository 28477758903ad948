"""promtool, built from the Go module proxy with the dev cluster's Prometheus (``ring-devcluster build --with prometheus``).

Missing is a failure, not a skip: build/test.sh builds it (its workloads
cluster runs ``--with prometheus``) before the tests run.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ringdevcluster import build


def promtool() -> Path:
    """The cached promtool binary; fails the test with the command that builds it."""
    try:
        paths = build.binary_paths(addons=["prometheus"])
    except build.BuildError as err:
        pytest.fail(f"cannot locate promtool: {err}", pytrace=False)
    if paths is None or "promtool" not in paths:
        pytest.fail(
            "promtool is not built; run `ring-devcluster build --with prometheus` (Go module proxy, ~5 min cold)",
            pytrace=False,
        )
    return paths["promtool"]


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` (its output captured, never raising)."""
    return subprocess.run(
        [str(promtool()), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
