"""Fixtures for the tests of Kueue-admitted jobs (marker ``kueue``: ``build/test.sh`` runs them, ``build/kueue.sh`` alone).

These tests use their own kwok cluster, ``ring-devcluster up --with
jobset,trainer,kueue`` in ``$RING_DEVCLUSTER_KUEUE_STATE`` (default: the main
state directory with ``-kueue`` appended): the real JobSet, Job and Trainer
controllers make the pods, kwok runs them, and Kueue decides when each job
may run and, with Topology Aware Scheduling, on which node each pod goes.
Kueue acts only on jobs that name a LocalQueue, but the JobSet and Trainer
controllers act on every object of their kinds, so this cannot be the
cluster of the tests that make JobSet pods by hand; it has no real node, so
it never waits for the node lock. The fixtures ``kubeconfig`` and ``k8s``
are overridden for this directory; the shared ``namespace`` and
``controller`` fixtures follow them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringdevcluster import Cluster
from tests.support.clients import K8s, kueue_state_dir
from tests.support.clusterup import bring_up
from tests.support.kueue import KUEUE_ADDONS


@pytest.fixture(scope="session")
def kueue_cluster(pytestconfig: pytest.Config) -> Cluster:
    """The kwok cluster with JobSet, Trainer and Kueue running (started, repaired or reused)."""
    return bring_up(
        pytestconfig, state_dir=kueue_state_dir(), what=f"the control plane with {', '.join(KUEUE_ADDONS)}",
        addons=KUEUE_ADDONS,
    )  # fmt: skip


@pytest.fixture(scope="session")
def kubeconfig(kueue_cluster: Cluster) -> Path:
    """Admin kubeconfig of the Kueue cluster (overrides the main cluster's)."""
    return kueue_cluster.kubeconfig


@pytest.fixture(scope="session")
def k8s(kubeconfig: Path) -> Iterator[K8s]:
    """Admin clients of the Kueue cluster (overrides the main cluster's)."""
    clients = K8s.from_kubeconfig(kubeconfig)
    yield clients
    clients.api.close()  # type: ignore[no-untyped-call]
