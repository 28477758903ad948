"""``ring-launch --from-api``: read the spec ConfigMap through the API server.

A ConfigMap mounted as a volume reaches the container only when the kubelet
next syncs the pod (up to a minute or two after the write). Reading the
ConfigMap through the API server sees the controller's write at once, at the
price of a service account that may read it. It runs on the standard library
(:mod:`ranktable.launch.kubeapi`: ``http.client`` over ``ssl`` and ``socket``; configuration from
:mod:`ranktable.launch.kubeconfig`), so the one-file launcher works in any image and
a start costs no client package import.

The loop is the client-go reflector's, reduced to one object: **list** the
ConfigMap by ``fieldSelector=metadata.name=NAME`` (a list, not a get, because
its resourceVersion is the point to watch from, and a missing ConfigMap is an
empty list rather than an error), then **watch** from that resourceVersion
with bookmarks and a bounded ``timeoutSeconds`` (so a half-open stream cannot
hang the launcher past its deadline), re-watching from the last
resourceVersion seen (events and bookmarks advance it) when a watch ends. A
``410 Gone`` (the resourceVersion was compacted away) or any transport error
relists, with exponential backoff for errors. ``403`` is final
(:class:`ApiAccessError`, ``ring-launch`` exits 77): the Role below is
missing, and waiting will not fix that. ``401`` is final too, after one
retry with the token file read again (a rotated token). A server
certificate that fails verification is final as well
(:class:`ranktable.launch.kubeapi.TlsVerifyError`, an :class:`ApiConfigError`:
exit 78). An answer over a cap or one that cannot be framed
(:class:`ranktable.launch.kubeapi.HttpProtocolError`) is one log line and a
retry with backoff, like any transport error.

Client configuration (:func:`ranktable.launch.kubeconfig.load_client_config`):
``--kubeconfig`` when given; else the in-cluster service account; else
``$KUBECONFIG`` or ``~/.kube/config``.

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

import math
import time
from typing import TYPE_CHECKING

from ranktable.backoff import Backoff
from ranktable.launch.kubeapi import CONNECT_TIMEOUT, ApiStatusError, KubeClient, quote
from ranktable.launch.kubeconfig import ApiConfigError, load_client_config
from ranktable.launch.wait import Log, Observation, observation_from_configmap, quiet
from ranktable.registration import pod_path, registration_patch
from ranktable.stored import write_rank_table

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import Any, Final

#: Upper bound of one watch request (seconds); shorter near the deadline.
WATCH_SECONDS: Final = 60
#: Error retries: first and longest delay (seconds), doubling, no jitter;
#: back to the first after a watch that ended normally.
BACKOFF_FIRST: Final = 0.5
BACKOFF_MAX: Final = 10.0

__all__ = ["ApiAccessError", "ApiConfigError", "ApiSource"]


class ApiAccessError(RuntimeError):
    """The API server refused us for good (authentication or authorization)."""


class ApiSource:
    """Lists, then watches, ConfigMap ``namespace/name`` (see the module docstring).

    ``client``, when given, is the connection to use (the one-file
    launcher's early registration made it, :mod:`ranktable.launch.earlyreg`);
    otherwise :meth:`connect` loads the configuration of ``kubeconfig``.
    """

    def __init__(
        self,
        *,
        namespace: str,
        name: str,
        kubeconfig: str | None = None,
        log: Log = quiet,
        client: KubeClient | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.kubeconfig = kubeconfig
        self.where = f"ConfigMap {namespace}/{name}"
        self._log = log
        self._client = client

    def connect(self) -> None:
        """Load the client configuration now: raises :class:`ApiConfigError` at once (no retry can fix it)."""
        if self._client is None:
            self._client = KubeClient(load_client_config(self.kubeconfig), connect_timeout=CONNECT_TIMEOUT)

    def register(self, *, pod: str, ip: str, started: str, ips: Sequence[str] = ()) -> None:
        """Self-registration: set :data:`REGISTERED_ANNOTATION` on this launcher's own pod (one merge PATCH).

        Raises :class:`ranktable.launch.kubeapi.ApiStatusError` when the API server
        refuses (403 without the grant of ``build/launcher-rbac.yaml``) and
        ValueError for an ``ip`` that is not an address; the caller goes on
        waiting either way: registering only makes the spec come sooner.
        ``ips``: every IP of the pod (``$POD_IPS``), written on dual-stack pods.
        """
        self.connect()
        assert self._client is not None
        body = registration_patch(ip=ip, started=started, ips=ips)
        self._client.patch_merge(pod_path(self.namespace, pod), body, timeout=CONNECT_TIMEOUT)

    def rank_table_path(self, hccl: str) -> str:
        """Write ``hccl`` to this user's local copy of the table and return its path (see
        :func:`ranktable.stored.write_rank_table`: one file per table, older ones removed once unused)."""
        return write_rank_table(hccl)

    def observe(self, deadline: float) -> Iterator[Observation]:
        self.connect()
        client = self._client
        assert client is not None
        path = f"/api/v1/namespaces/{quote(self.namespace)}/configmaps"
        selector = {"fieldSelector": f"metadata.name={self.name}"}
        resource_version: str | None = None
        configmap: dict[str, Any] | None = None
        backoff = Backoff(initial=BACKOFF_FIRST, cap=BACKOFF_MAX, jitter=0.0, reset_after=math.inf)
        retried_401 = False
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                try:
                    if resource_version is None:
                        body = client.get_json(path, selector, timeout=max(5.0, min(30.0, remaining)))
                        items = body.get("items") or []
                        configmap = items[0] if items else None
                        resource_version = str((body.get("metadata") or {}).get("resourceVersion", ""))
                        retried_401 = False
                        yield observation_from_configmap(configmap)
                        continue
                    seconds = max(1, min(WATCH_SECONDS, int(remaining)))
                    query = {
                        **selector,
                        "watch": "true",
                        "resourceVersion": resource_version,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": str(seconds),
                    }
                    for event in client.stream(path, query, timeout=seconds + CONNECT_TIMEOUT):
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
                        configmap = None if kind == "DELETED" else obj
                        yield observation_from_configmap(configmap)
                    else:
                        # The watch ended at its timeout: one more look keeps heartbeats going.
                        yield observation_from_configmap(configmap)
                    backoff.reset()
                except ApiStatusError as err:
                    if err.status == 410:  # the watch's resourceVersion was compacted away: relist now
                        self._log("watch: resourceVersion too old (410 Gone), relisting")
                        resource_version = None
                        continue
                    if err.status == 401 and not retried_401:  # the token may have rotated under us: once more
                        retried_401 = True
                        self._log(f"{self.where}: 401 Unauthorized; reading the token again")
                        resource_version = None
                        continue
                    if err.status in (401, 403):
                        verb = "watch" if resource_version is not None else "list"
                        raise ApiAccessError(
                            f"{self.where}: the API server refused to {verb} it ({err.status} {err.reason}: "
                            f"{err.message or 'no message'}); the pod's service account needs a Role with "
                            f'apiGroups [""], resources ["configmaps"], resourceNames ["{self.name}"], '
                            f'verbs ["get","list","watch"] in namespace {self.namespace}, bound to it '
                            "(see `ring-launch --help`)"
                        ) from None
                    self._pause(f"API error {err}", backoff, deadline)
                    resource_version = None
                except ApiConfigError:
                    raise
                except Exception as err:  # noqa: BLE001 - transport errors (sockets, TLS, HTTP framing and caps: kubeapi.HttpProtocolError, bad JSON): retried to the deadline
                    self._pause(f"{type(err).__name__}: {err}", backoff, deadline)
                    resource_version = None
        finally:
            client.close()

    def _pause(self, what: str, backoff: Backoff, deadline: float) -> None:
        delay = min(backoff.next_delay(), max(0.0, deadline - time.monotonic()))
        self._log(f"{self.where}: {what}; retrying in {delay:.1f}s")
        time.sleep(delay)
