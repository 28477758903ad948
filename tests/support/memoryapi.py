"""An in-memory stand-in for the agent's ``KubeAPI`` protocol.

ConfigMaps live in a dict with resourceVersions, uids and the API server's
409/404 rules, so the per-job write path and the agent's routing are tested
on plain data. It is not a mock of the API server: the integration tests run
the real one; this only implements the protocol :mod:`agent.api` defines.
``fail`` scripts failures: a verb name mapped to exceptions raised by its next
calls (one per call, in order).
"""

from __future__ import annotations

import copy
from typing import Any

from agent.api import Conflict, NotFound
from model.configmap import configmap_record
from model.records import ConfigMapRecord

Json = dict[str, Any]


class MemoryAPI:
    """ConfigMaps in a dict, with resourceVersion preconditions; Events in a list."""

    def __init__(self) -> None:
        self.cms: dict[tuple[str, str], Json] = {}
        self.events: list[tuple[str, str]] = []
        #: The messages of :attr:`events`, in the same order.
        self.event_messages: list[str] = []
        self.calls: list[str] = []
        #: Pod annotation patches: (name, uid, annotations); ``pod_error`` raised instead when set.
        self.touches: list[tuple[str, str, dict[str, str]]] = []
        self.pod_error: dict[str, Exception] = {}
        self._rv = 100
        self._uid = 0
        self.fail: dict[str, list[Exception]] = {}

    def _maybe_fail(self, verb: str) -> None:
        self.calls.append(verb)
        queued = self.fail.get(verb)
        if queued:
            raise queued.pop(0)

    def _stamp(self, body: Json, *, uid: str | None = None) -> Json:
        self._rv += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self._rv)
        if uid is None:
            self._uid += 1
            uid = f"cm-{self._uid}"
        body["metadata"]["uid"] = uid
        return body

    def put(self, namespace: str, body: Json) -> Json:
        """Store ``body`` as someone else would (no precondition)."""
        key = (namespace, body["metadata"]["name"])
        old = self.cms.get(key)
        self.cms[key] = self._stamp(body, uid=old["metadata"]["uid"] if old else None)
        return copy.deepcopy(self.cms[key])

    def record(self, namespace: str, name: str) -> ConfigMapRecord | None:
        raw = self.cms.get((namespace, name))
        return configmap_record(raw) if raw else None

    async def get_configmap(self, namespace: str, name: str) -> Json | None:
        self._maybe_fail("get")
        raw = self.cms.get((namespace, name))
        return copy.deepcopy(raw) if raw else None

    async def create_configmap(self, namespace: str, body: Json) -> Json:
        self._maybe_fail("create")
        key = (namespace, body["metadata"]["name"])
        if key in self.cms:
            raise Conflict(409, "AlreadyExists", "already exists")
        self.cms[key] = self._stamp(body)
        return copy.deepcopy(self.cms[key])

    async def replace_configmap(self, namespace: str, name: str, body: Json) -> Json:
        self._maybe_fail("update")
        old = self.cms.get((namespace, name))
        if old is None:
            raise NotFound(404, "NotFound", "not found")
        if body["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        self.cms[(namespace, name)] = self._stamp(body, uid=old["metadata"]["uid"])
        return copy.deepcopy(self.cms[(namespace, name)])

    async def emit_event(self, *, involved: Json, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason))
        self.event_messages.append(message)

    async def annotate_pod(self, namespace: str, name: str, *, uid: str, annotations: dict[str, str]) -> None:
        if name in self.pod_error:
            raise self.pod_error[name]
        self.touches.append((name, uid, dict(annotations)))


class MemoryLeases:
    """Leases in a dict behind the elector's ``RequestFunc``: GET, POST, PUT with
    resourceVersion preconditions (404 and 409 as the API server answers).
    ``down`` makes every request fail without an answer (a transport error)."""

    def __init__(self) -> None:
        self.leases: dict[str, Json] = {}
        self.calls: list[tuple[str, str]] = []
        self.down = False
        self._rv = 1000

    def spec(self, name: str = "lease") -> Json:
        return dict(self.leases[f"/apis/coordination.k8s.io/v1/namespaces/ns/leases/{name}"]["spec"])

    def put_spec(self, spec: Json, name: str = "lease") -> None:
        """Write a Lease as another candidate would (no precondition)."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/ns/leases/{name}"
        self._rv += 1
        old = self.leases.get(path, {"metadata": {"name": name, "namespace": "ns"}})
        self.leases[path] = {
            "metadata": {**old["metadata"], "resourceVersion": str(self._rv)},
            "spec": {**old.get("spec", {}), **spec},
        }

    async def __call__(self, method: str, path: str, *, body: Json | None = None) -> Json:
        self.calls.append((method, path))
        if self.down:
            raise OSError("connection refused")
        if method == "GET":
            if path not in self.leases:
                raise NotFound(404, "NotFound", "not found")
            return copy.deepcopy(self.leases[path])
        assert body is not None
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.leases:
                raise Conflict(409, "AlreadyExists", "already exists")
        elif method == "PUT":
            if path not in self.leases:
                raise NotFound(404, "NotFound", "not found")
            if body["metadata"].get("resourceVersion") != self.leases[path]["metadata"]["resourceVersion"]:
                raise Conflict(409, "Conflict", "the object has been modified")
        else:
            raise AssertionError(f"unexpected verb {method}")
        self._rv += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self._rv)
        self.leases[path] = stored
        return copy.deepcopy(stored)
