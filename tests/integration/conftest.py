"""Integration fixtures: a real ring-controller process watching the test's namespace."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controllerproc import ControllerProcess


@pytest.fixture
def controller(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[ControllerProcess]:
    """``ring-controller`` started on the test's namespace, ready (caches synced)."""
    proc = ControllerProcess(kubeconfig=str(kubeconfig), namespace=namespace, log_path=tmp_path / "controller.log")
    proc.start()
    yield proc
    code = proc.stop(signal.SIGTERM)
    print(f"controller exit code {code}; log tail:\n{proc.log_tail(20)}")
