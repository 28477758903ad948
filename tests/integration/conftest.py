"""Fixtures shared by the self-registration tests (the policy's and the controller's)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.support.controllerproc import ControllerProcess


@pytest.fixture
def idle_node(k8s: Any) -> Iterator[str]:
    """A Node that nothing (no kubelet, no kwok) runs: its pods stay as the test writes them."""
    name = f"no-kubelet-{secrets.token_hex(3)}"
    k8s.core.create_node({"metadata": {"name": name, "labels": {"ring-controller.test/idle": "true"}}})
    yield name
    k8s.core.delete_node(name)


@pytest.fixture
def registering_controller(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[ControllerProcess]:
    """``ring-controller --self-registration`` on the test's namespace, ready."""
    from tests.support.controllerproc import ControllerProcess

    proc = ControllerProcess(
        kubeconfig=str(kubeconfig),
        namespace=namespace,
        log_path=tmp_path / "controller.log",
        extra=["--self-registration"],
    )
    proc.start()
    yield proc
    proc.stop()
