"""The session fixtures' one way to get a dev cluster: started, repaired or reused, or the test fails loudly."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ringdevcluster import Cluster


def bring_up(pytestconfig: pytest.Config, *, state_dir: Path, what: str, **options: Any) -> Cluster:
    """``ringdevcluster.ensure_up(state_dir=..., **options)`` with its progress shown live (a cold build of
    the binaries takes minutes, and pytest would hold those lines until the end); any failure becomes
    ``pytest.fail`` naming ``what`` (e.g. "the control plane with lws"), the state directory and the error,
    so every test that needs the cluster errors with the reason and none is skipped."""
    from ringdevcluster import ensure_up  # lazily: `pytest tests/unit` needs no dev-cluster tool

    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    uncaptured = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
    try:
        with uncaptured:
            return ensure_up(
                state_dir=state_dir,
                say=lambda msg: print(f"ring-devcluster: {msg}", file=sys.stderr, flush=True),
                **options,
            )
    except Exception as err:  # noqa: BLE001 - every failure must fail loudly, with its message
        pytest.fail(f"{what} could not be brought up in {state_dir}: {type(err).__name__}: {err}", pytrace=False)
