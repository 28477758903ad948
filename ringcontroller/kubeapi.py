"""The agent's API verbs (:class:`agent.api.KubeAPI`) on kubernetes-asyncio, raw JSON.

Requests go through ``ApiClient.call_api`` with ``_preload_content=False``
and ``Accept: application/json``: the server's JSON is read as-is, without
the generated models (faster, and nothing is lost for fields a model version
does not know). HTTP failures become :mod:`agent.api` exceptions.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from typing import Any

import structlog
from kubernetes_asyncio.client import ApiClient

from agent.api import ApiError, Conflict, NotFound

Json = dict[str, Any]
log = structlog.get_logger()

#: Seconds one write or read may take before it is retried by the queue.
REQUEST_TIMEOUT = 30.0
COMPONENT = "ring-controller"


class RestKubeAPI:
    """ConfigMap and Event verbs over one ``ApiClient``.

    ``on_request(verb, code)`` is called after every request (for the API
    request counter); ``code`` is 0 when no response arrived.
    """

    def __init__(self, client: ApiClient, *, on_request: Any = None) -> None:
        self._client = client
        self._on_request = on_request
        self._instance = os.environ.get("POD_NAME") or socket.gethostname()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Json | None = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Json:
        """One JSON request; returns the body or raises ApiError/Conflict/NotFound."""
        status = 0
        try:
            resp = await self._client.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            try:
                status = resp.status
                text = await resp.text()
            finally:
                resp.release()
        finally:
            if self._on_request is not None:
                self._on_request(method, status)
        if 200 <= status < 300:
            return json.loads(text) if text else {}
        message = text
        try:
            message = json.loads(text).get("message", text)
        except (ValueError, AttributeError):
            pass
        if status == 404:
            raise NotFound(status, message)
        if status == 409:
            raise Conflict(status, message)
        raise ApiError(status, message)

    async def get_configmap(self, namespace: str, name: str) -> Json | None:
        try:
            return await self.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except NotFound:
            return None

    async def create_configmap(self, namespace: str, body: Json) -> Json:
        return await self.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body=body)

    async def replace_configmap(self, namespace: str, name: str, body: Json) -> Json:
        return await self.request("PUT", f"/api/v1/namespaces/{namespace}/configmaps/{name}", body=body)

    async def annotate_pod(self, namespace: str, name: str, *, uid: str, annotations: dict[str, str]) -> None:
        """A JSON merge patch of the pod's annotations; its ``metadata.uid`` is a
        precondition (the server answers 409 when the name now holds another pod)."""
        await self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body={"metadata": {"uid": uid, "annotations": annotations}},
            content_type="application/merge-patch+json",
        )

    async def emit_event(self, *, involved: Json, event_type: str, reason: str, message: str) -> None:
        """Create a core/v1 Event on ``involved``; failures are logged, not raised."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = involved["namespace"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": involved,
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
        }
        try:
            await self.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
        except Exception as e:  # noqa: BLE001 - an Event is best effort
            log.warning("event.failed", reason=reason, error=str(e))
