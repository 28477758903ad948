"""Where the test clusters live, and sync admin clients for them."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from kubernetes import client, config

REPO = Path(__file__).resolve().parents[2]


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


def workloads_state_dir() -> Path:
    """The state directory of the cluster with the workload controllers (build/test.sh uses the same)."""
    env = os.environ.get("RING_DEVCLUSTER_WORKLOADS_STATE")
    return Path(env) if env else Path(f"{devcluster_state_dir()}-workloads")


def kueue_state_dir() -> Path:
    """The state directory of the kwok cluster with JobSet, Trainer and Kueue (``build/test.sh`` brings it up)."""
    env = os.environ.get("RING_DEVCLUSTER_KUEUE_STATE")
    return Path(env) if env else Path(f"{devcluster_state_dir()}-kueue")


def lws_state_dir() -> Path:
    """The state directory of the cluster running the real LWS controller (opt-in: ``build/test.sh --with lws``)."""
    env = os.environ.get("RING_DEVCLUSTER_LWS_STATE")
    return Path(env) if env else Path(f"{devcluster_state_dir()}-lws")
