"""What API-mode launcher tests set up on the real API server: spec ConfigMaps, service accounts, tokens."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from ranktable.clusterspec import ClusterSpec, spec_to_json


def put_spec(k8s: Any, namespace: str, name: str, spec: ClusterSpec) -> None:
    """Create or replace ConfigMap ``name`` holding ``spec`` as ``cluster.json``."""
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"cluster.json": spec_to_json(spec)})
    try:
        k8s.core.replace_namespaced_config_map(name, namespace, body)
    except client.ApiException as err:
        if err.status != 404:
            raise
        k8s.core.create_namespaced_config_map(namespace, body)


def service_account(k8s: Any, namespace: str, name: str, *, configmap: str | None, verbs: list[str]) -> str:
    """Create ServiceAccount ``name`` (with a Role on ``configmap`` granting ``verbs``) and return a bound token."""
    k8s.core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    if configmap is not None:
        k8s.rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": name},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [configmap], "verbs": verbs}
                ],
            },
        )
        k8s.rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            },
        )
    request = k8s.core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"audiences": [], "expirationSeconds": 3600}}
    )
    return str(request.status.token)


def cluster_of(admin: Path) -> dict[str, Any]:
    """The admin kubeconfig's cluster entry (``server``, ``certificate-authority-data``)."""
    return dict(yaml.safe_load(admin.read_text(encoding="utf-8"))["clusters"][0]["cluster"])


def service_account_dir(admin: Path, token: str, directory: Path) -> Path:
    """A directory laid out as the kubelet projects a service account: ``token``, ``ca.crt``, ``namespace``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token, encoding="utf-8")
    (directory / "ca.crt").write_bytes(base64.b64decode(cluster_of(admin)["certificate-authority-data"]))
    return directory


def host_port(admin: Path) -> tuple[str, str]:
    """``KUBERNETES_SERVICE_HOST`` and ``_PORT`` for the API server of ``admin``."""
    server = str(cluster_of(admin)["server"])
    hostport = server.split("://", 1)[1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    return host.strip("[]"), port


def tf_config_of(stdout: str) -> dict[str, Any]:
    """TF_CONFIG from ``ring-launch --print json`` output."""
    return dict(json.loads(json.loads(stdout)["TF_CONFIG"]))
