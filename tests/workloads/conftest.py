"""Fixtures for the tests that run on the cluster with the real workload controllers.

These tests use their own control plane, ``ring-devcluster up --with
jobset,volcano,trainer,node,prometheus`` in ``$RING_DEVCLUSTER_WORKLOADS_STATE`` (default:
the main state directory with ``-workloads`` appended). It also has the
machine's one real node (``--with node``: only one cluster can), so the
tests of real containers run here, next to the real workload controllers.
The real controllers act on EVERY object of their kinds, so they cannot
share a cluster with the tests that create JobSet and Volcano pods themselves
(test_controller_kinds, test_controller_volcano): they would create the same
pods first and overwrite a Volcano job's version. The fixtures ``kubeconfig`` and ``k8s`` are
overridden for this directory; the shared ``namespace`` and ``controller``
fixtures follow them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringdevcluster import Cluster
from tests.support.clients import K8s, workloads_state_dir
from tests.support.clusterup import bring_up
from tests.support.promapi import PrometheusApi
from tests.support.realnode import import_busybox
from tests.support.workloads import CLUSTER_ADDONS


def _opted(*variables: str) -> bool:
    return any(os.environ.get(v) == "1" for v in variables)


@pytest.fixture(scope="session")
def workloads(pytestconfig: pytest.Config) -> Cluster:
    """The control plane with JobSet, Volcano, Trainer and the real node running (started, repaired or reused)."""
    return bring_up(
        pytestconfig,
        state_dir=workloads_state_dir(),
        what=f"the control plane with {', '.join(CLUSTER_ADDONS)}",
        addons=CLUSTER_ADDONS,
        # The opt-in second-network tests need a cluster made with it, attached by a chained
        # configuration or by Multus (ensure_up says so otherwise).
        second_network=True if _opted("RING_TEST_SECOND_NETWORK", "RING_TEST_MULTUS") else None,
        multus=True if _opted("RING_TEST_MULTUS") else False if _opted("RING_TEST_SECOND_NETWORK") else None,
    )


@pytest.fixture(scope="session")
def kubeconfig(workloads: Cluster) -> Path:
    """Admin kubeconfig of the workloads cluster (overrides the main cluster's)."""
    return workloads.kubeconfig


@pytest.fixture(scope="session")
def k8s(kubeconfig: Path) -> Iterator[K8s]:
    """Admin clients of the workloads cluster (overrides the main cluster's)."""
    clients = K8s.from_kubeconfig(kubeconfig)
    yield clients
    clients.api.close()  # type: ignore[no-untyped-call]


@pytest.fixture(scope="session")
def real_node(workloads: Cluster) -> Cluster:
    """The workloads cluster, for tests about its real node (Ready once ``up`` returned)."""
    return workloads


@pytest.fixture(scope="session")
def busybox_image(real_node: Cluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A busybox image in the real node's containerd (imported once per session); its name."""
    return import_busybox(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="session")
def prometheus(workloads: Cluster) -> PrometheusApi:
    """The HTTP API of the cluster's Prometheus (``--with prometheus``: scrapes the ring-controller pods)."""
    if "prometheus" not in workloads.addons:
        pytest.fail(f"the workloads cluster runs no Prometheus (addons: {workloads.addons})", pytrace=False)
    return PrometheusApi(f"http://127.0.0.1:{workloads.ports['prometheus-web']}")
