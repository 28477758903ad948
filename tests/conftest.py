"""Shared fixtures: one real control plane per test session, a namespace per test.

The cluster comes from :func:`ringcontroller.devcluster.ensure_up`, the same
code as ``ring-devcluster up``; its state directory is ``$RING_DEVCLUSTER_STATE``
or ``<repo>/.state/devcluster``. It is left running after the session so the
next run reuses it in well under a second; ``build/test.sh`` (or
``ring-devcluster down``) decides when it goes away. If the cluster cannot be
brought up, every test that needs it ERRORS with the reason: tests never skip.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ringcontroller.devcluster import Cluster, ensure_up

REPO = Path(__file__).resolve().parents[1]


def devcluster_state_dir() -> Path:
    """The state directory the tests (and build/test.sh) use."""
    return Path(os.environ.get("RING_DEVCLUSTER_STATE") or REPO / ".state" / "devcluster")


@dataclasses.dataclass(frozen=True)
class K8s:
    """Sync Kubernetes clients for the admin user of the test cluster."""

    api: client.ApiClient
    core: client.CoreV1Api
    apps: client.AppsV1Api
    batch: client.BatchV1Api
    rbac: client.RbacAuthorizationV1Api
    custom: client.CustomObjectsApi

    @classmethod
    def from_kubeconfig(cls, path: Path) -> K8s:
        api = config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
        return cls(
            api=api,
            core=client.CoreV1Api(api),
            apps=client.AppsV1Api(api),
            batch=client.BatchV1Api(api),
            rbac=client.RbacAuthorizationV1Api(api),
            custom=client.CustomObjectsApi(api),
        )


@pytest.fixture(scope="session")
def devcluster(pytestconfig: pytest.Config) -> Cluster:
    """The running control plane (started, repaired or reused on first use)."""
    started = time.monotonic()
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    # Show progress live: a cold build of the binaries takes many minutes.
    uncaptured = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
    try:
        with uncaptured:
            cluster = ensure_up(
                state_dir=devcluster_state_dir(),
                say=lambda msg: print(f"ring-devcluster: {msg}", file=sys.stderr, flush=True),
            )
    except Exception as err:  # noqa: BLE001 - every failure must fail loudly, with its message
        pytest.fail(
            f"the local control plane could not be brought up in {devcluster_state_dir()}: "
            f"{type(err).__name__}: {err}",
            pytrace=False,
        )
    print(f"devcluster ready in {time.monotonic() - started:.1f}s: {cluster.server}", file=sys.stderr)
    return cluster


@pytest.fixture(scope="session")
def kubeconfig(devcluster: Cluster) -> Path:
    """Path of the admin kubeconfig (``system:masters``)."""
    return devcluster.kubeconfig


@pytest.fixture(scope="session")
def k8s(kubeconfig: Path) -> Iterator[K8s]:
    """Admin sync clients (core, apps, batch, rbac, custom objects)."""
    clients = K8s.from_kubeconfig(kubeconfig)
    yield clients
    clients.api.close()  # type: ignore[no-untyped-call]


def _namespace_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{slug}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(k8s: K8s, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (without waiting) afterwards.

    Yields only once its ``default`` ServiceAccount exists, so pods can be
    created at once (the ServiceAccount admission plugin rejects them before).
    """
    name = _namespace_name(request.node.name)
    k8s.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"ring-controller.test/ns": "true"}))
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            k8s.core.read_namespaced_service_account("default", name)
            break
        except ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    yield name
    try:
        k8s.core.delete_namespace(name, propagation_policy="Background")
    except ApiException as err:
        if err.status != 404:
            raise
