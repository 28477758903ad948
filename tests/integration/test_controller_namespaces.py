"""``--namespace a,b``: the controller writes specs in the listed namespaces and nowhere else.

Real control plane, real controller process, Deployments run by the real
controller-manager on the kwok nodes. The job in the unlisted namespace is
created first: a controller that watched it would have completed it before the
jobs created after it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.controllerproc import ControllerProcess
from tests.support.factories import deployment
from tests.support.kubehelp import create_namespace, delete_namespace, fresh_namespace_name, read_configmap, wait_spec

pytestmark = pytest.mark.integration


@pytest.fixture
def other_namespaces(k8s: Any, request: pytest.FixtureRequest) -> Iterator[list[str]]:
    names = [create_namespace(k8s, fresh_namespace_name(f"{request.node.name}-{i}")) for i in range(2)]
    yield names
    for name in names:
        delete_namespace(k8s, name)


def test_listed_namespaces_get_specs_and_an_unlisted_one_does_not(
    k8s: Any, kubeconfig: Path, namespace: str, other_namespaces: list[str], tmp_path: Path
) -> None:
    second, unlisted = other_namespaces
    k8s.apps.create_namespaced_deployment(unlisted, deployment("outside"))
    proc = ControllerProcess(
        kubeconfig=str(kubeconfig), namespace=f"{namespace},{second}", log_path=tmp_path / "controller.log"
    ).start()
    try:
        k8s.apps.create_namespaced_deployment(namespace, deployment("inside"))
        k8s.apps.create_namespaced_deployment(second, deployment("inside"))
        for ns in (namespace, second):
            spec = wait_spec(k8s, ns, "rings-config-inside")
            assert spec["job"]["namespace"] == ns and len(spec["members"]) == 2
        assert read_configmap(k8s, unlisted, "rings-config-outside") is None
    finally:
        code = proc.stop(signal.SIGTERM)
        print(f"controller exit code {code}; log tail:\n{proc.log_tail(10)}")
    assert read_configmap(k8s, unlisted, "rings-config-outside") is None
