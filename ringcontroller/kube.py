"""Raw-JSON reads and watches of any Kubernetes resource on kubernetes-asyncio.

The reflector needs two requests for any resource, built-in or custom: a
list page and a watch stream. Both go through ``ApiClient.call_api`` with
``_preload_content=False``, so authentication, TLS and the server address
come from the client's configuration as usual, but the JSON is read as-is:
no generated models (none exist for CRDs such as Volcano's Job, and parsing
pods into models costs time and memory for fields we drop anyway).

Every request is counted in ``ringcontroller_api_requests_total{verb,code}``
with the Kubernetes verb and the HTTP status, or ``<error>`` when no
response arrived.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from ringcontroller.metrics import client_metrics

__all__ = [
    "CONFIGMAPS",
    "PODS",
    "VOLCANO_JOBS",
    "ApiStatusError",
    "Json",
    "Resource",
    "get_json",
    "open_watch",
]

Json = dict[str, Any]

REQUEST_TIMEOUT = 60.0
"""Seconds a list page or other non-streaming read may take in total."""

CONNECT_TIMEOUT = 10.0
"""Seconds to establish a connection, for every request including watches."""


@dataclass(frozen=True)
class Resource:
    """A resource type by API group, version and plural (``""`` is the core group).

    ``str(resource)`` is ``plural`` for the core group and ``plural.group``
    otherwise (``pods``, ``jobs.batch.volcano.sh``): the label used in logs
    and metrics.
    """

    group: str
    version: str
    plural: str

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of the collection (in ``namespace``, or all) or of one object."""
        prefix = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if namespace is not None:
            prefix += f"/namespaces/{quote(namespace, safe='')}"
        prefix += f"/{self.plural}"
        if name is not None:
            prefix += f"/{quote(name, safe='')}"
        return prefix

    def __str__(self) -> str:
        return self.plural if not self.group else f"{self.plural}.{self.group}"


PODS = Resource("", "v1", "pods")
CONFIGMAPS = Resource("", "v1", "configmaps")
VOLCANO_JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs")


class ApiStatusError(Exception):
    """The API server answered with a failure ``Status`` (HTTP, or a watch ERROR event).

    ``status`` is the HTTP code (``code`` of the Status), ``reason`` its
    machine-readable reason (``Expired``, ``Gone``, ``NotFound``, ...).
    """

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def expired(self) -> bool:
        """True for 410 Gone / Expired: the resourceVersion or continue token is too old."""
        return self.status == 410 or self.reason in ("Expired", "Gone")

    @classmethod
    def from_status(cls, status: Json, *, http_status: int = 0) -> ApiStatusError:
        """Build from a ``metav1.Status`` object (``code`` falls back to ``http_status``)."""
        code = status.get("code")
        return cls(
            code if isinstance(code, int) and code else http_status,
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
        )

    @classmethod
    def from_body(cls, http_status: int, reason: str, body: bytes) -> ApiStatusError:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            return cls.from_status(parsed, http_status=http_status)
        return cls(http_status, reason, body[:512].decode("utf-8", "replace"))


def _count(registry: CollectorRegistry | None, verb: str, code: str) -> None:
    client_metrics(registry).api_requests.labels(verb, code).inc()


async def _get(
    api: ApiClient, path: str, query: Sequence[tuple[str, str]], timeout: aiohttp.ClientTimeout
) -> aiohttp.ClientResponse:
    response: aiohttp.ClientResponse = await api.call_api(
        path,
        "GET",
        query_params=list(query),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=timeout,
    )
    return response


async def get_json(
    api: ApiClient,
    path: str,
    *,
    verb: str = "get",
    query: Sequence[tuple[str, str]] = (),
    registry: CollectorRegistry | None = None,
) -> Json:
    """GET ``path`` and return the decoded JSON body.

    ``verb`` (``get`` or ``list``) only labels the request counter. Raises
    ``ApiStatusError`` for a non-2xx answer; transport failures
    (``aiohttp.ClientError``, ``TimeoutError``) propagate unchanged.
    """
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT, sock_connect=CONNECT_TIMEOUT)
    try:
        response = await _get(api, path, query, timeout)
        try:
            body = await response.read()
        finally:
            response.release()
    except (TimeoutError, aiohttp.ClientError):
        _count(registry, verb, "<error>")
        raise
    _count(registry, verb, str(response.status))
    if not 200 <= response.status < 300:
        raise ApiStatusError.from_body(response.status, response.reason or "", body)
    decoded = json.loads(body)
    if not isinstance(decoded, dict):
        raise ValueError(f"GET {path}: expected a JSON object, got {type(decoded).__name__}")
    return decoded


@contextlib.asynccontextmanager
async def open_watch(
    api: ApiClient,
    path: str,
    *,
    query: Sequence[tuple[str, str]],
    idle_timeout: float | None,
    registry: CollectorRegistry | None = None,
) -> AsyncIterator[AsyncIterator[Json]]:
    """Open a watch stream on ``path``; the body of the ``async with`` reads events.

    ``query`` must contain ``watch=true`` and the watch parameters. Yields an
    async iterator of watch events (``{"type": ..., "object": {...}}``) that
    ends when the server closes the stream. A read that sees no byte for
    ``idle_timeout`` seconds raises ``TimeoutError`` (a half-open connection
    cannot hang the caller); the caller bounds the total duration itself.
    Raises ``ApiStatusError`` if the server refuses the watch. Leaving the
    block, normally or by cancellation, closes the response.
    """
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT, sock_read=idle_timeout)
    try:
        response = await _get(api, path, query, timeout)
    except (TimeoutError, aiohttp.ClientError):
        _count(registry, "watch", "<error>")
        raise
    try:
        _count(registry, "watch", str(response.status))
        if response.status != 200:
            raise ApiStatusError.from_body(response.status, response.reason or "", await response.read())
        yield _events(response)
    finally:
        if response.content.at_eof():
            response.release()  # fully read: the connection can be reused
        else:
            response.close()  # abandoned mid-stream: drop the connection


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[Json]:
    async for line in response.content:
        line = line.strip()
        if not line:
            continue
        event = json.loads(line)
        if isinstance(event, dict):
            yield event
