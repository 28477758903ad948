"""``ring-launch --from-api``: read the spec ConfigMap through the API server.

A ConfigMap mounted as a volume reaches the container only when the kubelet
next syncs the pod (up to a minute or two after the write). Reading the
ConfigMap through the API server sees the controller's write at once, at the
price of a service account that may read it. This module is the only place in
:mod:`ranktable` that touches Kubernetes, and it imports the synchronous
``kubernetes`` client lazily, inside :meth:`ApiSource.observe`, so file-mode
launches never pay for the import.

The loop is the client-go reflector's, reduced to one object: **list** the
ConfigMap by ``fieldSelector=metadata.name=NAME`` (a list, not a get, because
its resourceVersion is the point to watch from, and a missing ConfigMap is an
empty list rather than an error), then **watch** from that resourceVersion
with bookmarks and a bounded ``timeoutSeconds`` (so a half-open stream cannot
hang the launcher past its deadline), re-watching from the last
resourceVersion seen (events and bookmarks advance it) when a watch ends. A
``410 Gone`` (the resourceVersion was compacted away) or any transport error
relists, with exponential backoff for errors. ``401``/``403`` are final: they
mean the Role below is missing, and waiting will not fix that.

Client configuration: ``--kubeconfig`` when given; else the in-cluster service
account; else ``$KUBECONFIG`` or ``~/.kube/config``.

The Role the pod's service account needs, for ConfigMap ``rings-config-mnist``
in namespace ``team-a`` (list and watch with ``resourceNames`` are authorized
because the launcher always sends the ``metadata.name`` field selector)::

    apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata:
      name: ring-launch-mnist
      namespace: team-a
    rules:
      - apiGroups: [""]
        resources: ["configmaps"]
        resourceNames: ["rings-config-mnist"]
        verbs: ["get", "list", "watch"]
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata:
      name: ring-launch-mnist
      namespace: team-a
    subjects:
      - kind: ServiceAccount
        name: mnist-trainer          # the pod's serviceAccountName
        namespace: team-a
    roleRef:
      apiGroup: rbac.authorization.k8s.io
      kind: Role
      name: ring-launch-mnist
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any, Final

from ranktable.backoff import Backoff
from ranktable.clusterspec import CLUSTER_FILE, HCCL_FILE, SpecError
from ranktable.stored import files_from_configmap, write_rank_table
from ranktable.wait import Log, Observation, quiet

#: Upper bound of one watch request (seconds); shorter near the deadline.
WATCH_SECONDS: Final = 60
CONNECT_TIMEOUT: Final = 10.0
#: Error retries: first and longest delay (seconds), doubling, no jitter;
#: back to the first after a watch that ended normally.
BACKOFF_FIRST: Final = 0.5
BACKOFF_MAX: Final = 10.0


class ApiAccessError(RuntimeError):
    """The API server refused us for good (authentication or authorization)."""


class ApiSource:
    """Lists, then watches, ConfigMap ``namespace/name`` (see the module docstring)."""

    def __init__(self, *, namespace: str, name: str, kubeconfig: str | None = None, log: Log = quiet) -> None:
        self.namespace = namespace
        self.name = name
        self.kubeconfig = kubeconfig
        self.where = f"ConfigMap {namespace}/{name}"
        self._log = log

    def rank_table_path(self, hccl: str) -> str:
        """Write ``hccl`` to a new temporary file (it outlives the exec) and return its path."""
        return write_rank_table(hccl)

    def observe(self, deadline: float) -> Iterator[Observation]:
        from kubernetes.client.exceptions import ApiException

        api = self._core_api()
        selector = f"metadata.name={self.name}"
        resource_version: str | None = None
        data: dict[str, Any] | None = None
        backoff = Backoff(initial=BACKOFF_FIRST, cap=BACKOFF_MAX, jitter=0.0, reset_after=math.inf)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                if resource_version is None:
                    data, resource_version = self._list(api, selector, remaining)
                    yield _observation(data)
                    continue
                seconds = max(1, min(WATCH_SECONDS, int(remaining)))
                response = api.list_namespaced_config_map(
                    self.namespace,
                    field_selector=selector,
                    watch=True,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=seconds,
                    _preload_content=False,
                    _request_timeout=(CONNECT_TIMEOUT, seconds + CONNECT_TIMEOUT),
                )
                try:
                    for event in _events(response):
                        kind = event.get("type")
                        obj = event.get("object") or {}
                        if kind == "ERROR":
                            code = obj.get("code")
                            if code == 410:
                                self._log("watch: resourceVersion too old (410 Gone), relisting")
                            else:
                                self._pause(f"watch error {code}: {obj.get('message')}", backoff, deadline)
                            resource_version = None
                            break
                        resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                        if kind == "BOOKMARK":
                            continue
                        data = None if kind == "DELETED" else obj
                        yield _observation(data)
                    else:
                        # The watch ended at its timeout: one more look keeps heartbeats going.
                        yield _observation(data)
                finally:
                    response.close()
                    response.release_conn()
                backoff.reset()
            except ApiException as err:
                if err.status == 410:  # the watch's resourceVersion was compacted away: relist now
                    self._log("watch: resourceVersion too old (410 Gone), relisting")
                    resource_version = None
                    continue
                if err.status in (401, 403):
                    raise ApiAccessError(
                        f"{self.where}: the API server answered {err.status} {err.reason}; the pod's service "
                        f"account needs get/list/watch on configmaps/{self.name} (see `ring-launch --help`)"
                    ) from None
                self._pause(f"API error {err.status} {err.reason}", backoff, deadline)
                resource_version = None
            except Exception as err:  # noqa: BLE001 - transport errors (urllib3, sockets, TLS, bad JSON): retried to the deadline
                self._pause(f"{type(err).__name__}: {err}", backoff, deadline)
                resource_version = None

    def _list(self, api: Any, selector: str, remaining: float) -> tuple[dict[str, Any] | None, str]:
        response = api.list_namespaced_config_map(
            self.namespace,
            field_selector=selector,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, max(5.0, min(30.0, remaining))),
        )
        body = json.loads(response.data)
        items = body.get("items") or []
        data = items[0] if items else None
        return data, str(body.get("metadata", {}).get("resourceVersion", ""))

    def _pause(self, what: str, backoff: Backoff, deadline: float) -> None:
        delay = min(backoff.next_delay(), max(0.0, deadline - time.monotonic()))
        self._log(f"{self.where}: {what}; retrying in {delay:.1f}s")
        time.sleep(delay)

    def _core_api(self) -> Any:
        from kubernetes import client, config

        configuration = client.Configuration()
        if self.kubeconfig:
            config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return client.CoreV1Api(client.ApiClient(configuration))


def _observation(configmap: dict[str, Any] | None) -> Observation:
    """The spec files of a ConfigMap object (None: absent), either form (:mod:`ranktable.stored`)."""
    if configmap is None:
        return Observation(cluster=None, hccl=None, final=True)
    try:
        files = files_from_configmap(configmap)
    except SpecError as err:
        return Observation(cluster=None, hccl=None, final=True, error=f"ConfigMap: {err}")
    return Observation(cluster=files.get(CLUSTER_FILE), hccl=files.get(HCCL_FILE), final=True)


def _events(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON watch events of a streaming response, one per line."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)
