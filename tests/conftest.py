"""Shared fixtures: one real control plane per test session, a namespace per test.

The cluster comes from :func:`ringdevcluster.ensure_up`, the same
code as ``ring-devcluster up``; its state directory is ``$RING_DEVCLUSTER_STATE``
or ``<repo>/.state/devcluster``. It is left running after the session so the
next run reuses it in well under a second; ``build/test.sh`` (or
``ring-devcluster down``) decides when it goes away. If the cluster cannot be
brought up, every test that needs it ERRORS with the reason: tests never skip.

Nothing here imports the dev-cluster tool (``ringdevcluster``, installed from
build/devcluster) or the Kubernetes helpers at import time: the fixtures do, on
first use, so ``pytest tests/unit`` needs only ``pip install -e '.[test]'``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.optin import podgroups_selected

if TYPE_CHECKING:
    from ringdevcluster import Cluster
    from tests.support.clients import K8s
    from tests.support.controllerproc import ControllerProcess


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests never skip: a skipped test (a ``pytest.skip`` or ``skipif`` someone adds) fails the run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and exitstatus == pytest.ExitCode.OK:
        print(f"\n{len(skipped)} test(s) skipped; tests here fail loudly instead of skipping", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: Opt-in markers and the variable that selects each (``build/test.sh --with NAME`` sets it for
#: torch, kueue and lws; ``second_network`` needs a workloads cluster whose real node has the second
#: pod network, which every pod there then joins; ``multus`` one whose second network Multus attaches).
OPT_IN = {
    "torch": "RING_TEST_TORCH",
    "kueue": "RING_TEST_KUEUE",
    "second_network": "RING_TEST_SECOND_NETWORK",
    "multus": "RING_TEST_MULTUS",
    "lws": "RING_TEST_LWS",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the opt-in tests unless their variable is ``1``: ``torch`` (``RING_TEST_TORCH=1``,
    ``build/test.sh --with torch``), ``kueue`` (``RING_TEST_KUEUE=1``, which ``build/test.sh`` sets unless
    ``--without kueue``)
    , ``lws`` (``RING_TEST_LWS=1``, ``build/test.sh --with lws``), ``second_network``
    (``RING_TEST_SECOND_NETWORK=1``) and ``multus`` (``RING_TEST_MULTUS=1``); and ``podgroups`` unless
    :func:`~tests.support.optin.podgroups_selected` (they need a 1.37 control plane, as
    ``build/matrix.sh`` runs for 1.37 and ``build/podgroups.sh``; CI runs 1.35).

    Deselected, not skipped: they are opt-in (PyTorch's 2.8 GB of CUDA wheels,
    Kueue's and LWS's cold builds and clusters, a second control plane's, do not fit CI's cold
    budget; the second network changes every pod of the real node), and a skip fails
    ``build/test.sh``.
    """
    off = [marker for marker, variable in OPT_IN.items() if os.environ.get(variable) != "1"]
    if not podgroups_selected():
        off.append("podgroups")
    dropped = [item for item in items if any(item.get_closest_marker(m) is not None for m in off)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = {id(item) for item in dropped}
        items[:] = [item for item in items if id(item) not in gone]


@pytest.fixture(scope="session")
def devcluster(pytestconfig: pytest.Config) -> Cluster:
    """The running control plane (started, repaired or reused on first use)."""
    from tests.support.clients import devcluster_state_dir
    from tests.support.clusterup import bring_up

    started = time.monotonic()
    cluster = bring_up(pytestconfig, state_dir=devcluster_state_dir(), what="the local control plane")
    print(f"devcluster ready in {time.monotonic() - started:.1f}s: {cluster.server}", file=sys.stderr)
    return cluster


@pytest.fixture(scope="session")
def kubeconfig(devcluster: Cluster) -> Path:
    """Path of the admin kubeconfig (``system:masters``)."""
    return devcluster.kubeconfig


@pytest.fixture(scope="session")
def k8s(kubeconfig: Path) -> Iterator[K8s]:
    """Admin sync clients (core, apps, batch, rbac, custom objects)."""
    from tests.support.clients import K8s

    clients = K8s.from_kubeconfig(kubeconfig)
    yield clients
    clients.api.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def namespace(k8s: K8s, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (without waiting) afterwards.

    Yields only once its ``default`` ServiceAccount exists, so pods can be
    created at once (the ServiceAccount admission plugin rejects them before).
    """
    from tests.support.kubehelp import create_namespace, delete_namespace, fresh_namespace_name

    name = create_namespace(k8s, fresh_namespace_name(request.node.name))
    yield name
    delete_namespace(k8s, name)


@pytest.fixture
def controller(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[ControllerProcess]:
    """``ring-controller`` started on the test's namespace, ready (caches synced)."""
    from tests.support.controllerproc import ControllerProcess

    proc = ControllerProcess(kubeconfig=str(kubeconfig), namespace=namespace, log_path=tmp_path / "controller.log")
    proc.start()
    yield proc
    code = proc.stop(signal.SIGTERM)
    print(f"controller exit code {code}; log tail:\n{proc.log_tail(20)}")
