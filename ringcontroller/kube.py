"""The daemon's one Kubernetes API client: raw JSON over aiohttp.

Every request the daemon makes (list pages, watches, discovery, ConfigMap,
Event and Lease verbs) goes through :func:`_send` (:func:`open_watch` for
streams) on a :class:`Client`: one aiohttp session to the server of a
:class:`~ringcontroller.kubeconfig.Connection` (its TLS context and
``Authorization`` header), the JSON read and written as-is: no generated
models (none exist for CRDs such as Volcano's Job, and parsing pods into
models costs time and memory for fields we drop anyway), and no import of
the generated client either (:mod:`ringcontroller.kubeconfig` says why).
The functions here also take kubernetes-asyncio's ``ApiClient`` (the tests'
and benchmarks' clients): both have the ``call_api`` that :func:`_call` uses.

- One timeout table, :data:`TIMEOUTS`, by the kind of request.
- One request counter, ``ringcontroller_api_requests_total{verb,code}``, with
  the Kubernetes verb and the HTTP status, or ``<error>`` when no response
  arrived (the request raised or was cancelled).
- One error tree, :class:`agent.api.ApiError` (:class:`~agent.api.Conflict`,
  :class:`~agent.api.NotFound`, :class:`~agent.api.Gone`) for every failure
  answer; transport failures (``aiohttp.ClientError``, ``TimeoutError``)
  propagate unchanged.

:class:`RestKubeAPI` is the agent's :class:`agent.api.KubeAPI` on top of it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any, Final, Literal, Protocol
from urllib.parse import urlencode

import aiohttp
import structlog
from prometheus_client import CollectorRegistry

from agent.api import ApiError, Json, NotFound, NotLeader
from ranktable.podenv import pod_name
from ringcontroller.kubeconfig import Connection
from ringcontroller.metrics import client_metrics
from ringcontroller.resource import CONFIGMAPS, EVENTS, PODS, VOLCANO_JOBS, Resource

__all__ = [
    "CONFIGMAPS",
    "ApiClient",
    "Client",
    "PODS",
    "TIMEOUTS",
    "VOLCANO_JOBS",
    "Json",
    "Resource",
    "RestKubeAPI",
    "get_json",
    "open_watch",
    "request",
]

log = structlog.get_logger()

CONNECT_TIMEOUT: Final = 10.0
"""Seconds to establish a connection, for reads and watches."""

TimeoutKind = Literal["read", "verb"]

TIMEOUTS: Final[dict[TimeoutKind, aiohttp.ClientTimeout]] = {
    # A list page or discovery read: 60 s in total.
    "read": aiohttp.ClientTimeout(total=60.0, sock_connect=CONNECT_TIMEOUT),
    # One ConfigMap, Event or Lease verb: 30 s, then the queue (or the
    # election) retries it.
    "verb": aiohttp.ClientTimeout(total=30.0),
}
"""How long each kind of request may take. A watch has no total (the caller
bounds it); see :func:`watch_timeout`."""


def watch_timeout(idle_timeout: float | None) -> aiohttp.ClientTimeout:
    """A watch stream's timeout: connect within :data:`CONNECT_TIMEOUT`, then at
    most ``idle_timeout`` seconds without a byte, no total."""
    return aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT, sock_read=idle_timeout)


#: The Kubernetes verb of an HTTP method, for the request counter.
VERBS: Final = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

COMPONENT: Final = "ring-controller"
"""The Event source and reporting component."""


#: Accept headers of a metadata-only list and watch (PartialObjectMetadata):
#: the server sends each object's metadata without spec and status, e.g. the
#: labels of a Node without its image list and conditions.
METADATA_LIST: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_WATCH: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


class ApiClient(Protocol):
    """What :func:`_call` needs of a client: :class:`Client`, or kubernetes-asyncio's ``ApiClient``."""

    async def call_api(
        self,
        resource_path: str,
        method: str,
        *,
        query_params: list[tuple[str, str]],
        header_params: dict[str, str],
        body: Any,
        auth_settings: list[str],
        _preload_content: bool,
        _request_timeout: aiohttp.ClientTimeout,
    ) -> Any: ...


CONNECTIONS: Final = 100
"""Connections to the API server at most (kubernetes-asyncio's default too)."""

READ_BUFFER: Final = 2**21
"""Bytes aiohttp buffers per read: one watch event (a line) may carry a ConfigMap of up to 1 MiB."""


class Client:
    """The daemon's HTTP session to the API server of one :class:`~ringcontroller.kubeconfig.Connection`.

    ``async with Client(connection) as api:`` opens the session on the running
    loop (aiohttp sessions belong to one loop: each loop opens its own
    client) and closes it on the way out. HTTP proxies from the environment
    apply, as with kubernetes-asyncio (``trust_env``).
    """

    def __init__(self, connection: Connection, *, user_agent: str = "ring-controller") -> None:
        self.connection = connection
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(limit=CONNECTIONS, ssl=self.connection.ssl or False)
        self._session = aiohttp.ClientSession(connector=connector, trust_env=True, read_bufsize=READ_BUFFER)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call_api(
        self,
        resource_path: str,
        method: str,
        *,
        query_params: list[tuple[str, str]],
        header_params: dict[str, str],
        body: Any,
        auth_settings: list[str],
        _preload_content: bool,
        _request_timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """Send one request; the response is returned unread (the caller reads or streams it).

        The signature is the part of kubernetes-asyncio's ``call_api`` that
        :func:`_call` uses (``auth_settings`` and ``_preload_content`` are
        implied: the connection's credentials, never preloaded).
        """
        if self._session is None:
            raise RuntimeError("Client used outside `async with`")
        headers = {"User-Agent": self._user_agent, **header_params}
        authorization = await self.connection.authorization()
        if authorization:
            headers["Authorization"] = authorization
        url = self.connection.server + resource_path
        if query_params:
            url += "?" + urlencode(query_params)
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        return await self._session.request(
            method,
            url,
            headers=headers,
            data=data,
            timeout=_request_timeout,
        )


def _count(registry: CollectorRegistry | None, verb: str, code: str) -> None:
    client_metrics(registry).api_requests.labels(verb, code).inc()


async def _call(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, str]],
    body: Json | None,
    content_type: str,
    timeout: aiohttp.ClientTimeout,
    accept: str = "application/json",
) -> aiohttp.ClientResponse:
    response: aiohttp.ClientResponse = await api.call_api(
        path,
        method,
        query_params=list(query),
        header_params={"Accept": accept, "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=timeout,
    )
    return response


async def _send(
    api: ApiClient,
    method: str,
    path: str,
    *,
    verb: str,
    query: Sequence[tuple[str, str]],
    body: Json | None,
    content_type: str,
    timeout: aiohttp.ClientTimeout,
    registry: CollectorRegistry | None,
    accept: str = "application/json",
) -> bytes:
    """The one request path: send, read the whole body, count, map failures."""
    try:
        response = await _call(
            api, method, path, query=query, body=body, content_type=content_type, timeout=timeout, accept=accept
        )
        try:
            data = await response.read()
        finally:
            response.release()
    except BaseException:
        _count(registry, verb, "<error>")
        raise
    _count(registry, verb, str(response.status))
    if not 200 <= response.status < 300:
        raise ApiError.from_body(response.status, response.reason or "", data)
    return data


async def request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    verb: str | None = None,
    query: Sequence[tuple[str, str]] = (),
    body: Json | None = None,
    content_type: str = "application/json",
    timeout: TimeoutKind = "verb",
    registry: CollectorRegistry | None = None,
    accept: str = "application/json",
) -> Json:
    """One JSON request; returns the decoded body (``{}`` when empty).

    ``accept``: the Accept header (:data:`METADATA_LIST` asks for metadata only).

    ``verb`` labels the request counter (default: from ``method``, see
    :data:`VERBS`); ``timeout`` names a row of :data:`TIMEOUTS`. Raises
    :class:`~agent.api.ApiError` (a subclass by status) for a non-2xx answer,
    ``ValueError`` for a body that is not a JSON object; transport failures
    propagate unchanged.
    """
    data = await _send(
        api,
        method,
        path,
        verb=verb or VERBS.get(method, method.lower()),
        query=query,
        body=body,
        content_type=content_type,
        timeout=TIMEOUTS[timeout],
        registry=registry,
        accept=accept,
    )
    if not data:
        return {}
    decoded = json.loads(data)
    if not isinstance(decoded, dict):
        raise ValueError(f"{method} {path}: expected a JSON object, got {type(decoded).__name__}")
    return decoded


async def get_json(
    api: ApiClient,
    path: str,
    *,
    verb: str = "get",
    query: Sequence[tuple[str, str]] = (),
    registry: CollectorRegistry | None = None,
    accept: str = "application/json",
) -> Json:
    """GET ``path`` with the ``read`` timeout (a list page, discovery): :func:`request`.

    ``verb`` (``get`` or ``list``) only labels the request counter.
    """
    return await request(api, "GET", path, verb=verb, query=query, timeout="read", registry=registry, accept=accept)


@contextlib.asynccontextmanager
async def open_watch(
    api: ApiClient,
    path: str,
    *,
    query: Sequence[tuple[str, str]],
    idle_timeout: float | None,
    registry: CollectorRegistry | None = None,
    accept: str = "application/json",
) -> AsyncIterator[AsyncIterator[Json]]:
    """Open a watch stream on ``path``; the body of the ``async with`` reads events.

    ``query`` must contain ``watch=true`` and the watch parameters. Yields an
    async iterator of watch events (``{"type": ..., "object": {...}}``) that
    ends when the server closes the stream. A read that sees no byte for
    ``idle_timeout`` seconds raises ``TimeoutError`` (a half-open connection
    cannot hang the caller); the caller bounds the total duration itself.
    Raises :class:`~agent.api.ApiError` if the server refuses the watch.
    Leaving the block, normally or by cancellation, closes the response.
    """
    try:
        response = await _call(
            api,
            "GET",
            path,
            query=query,
            body=None,
            content_type="application/json",
            timeout=watch_timeout(idle_timeout),
            accept=accept,
        )
    except BaseException:
        _count(registry, "watch", "<error>")
        raise
    try:
        _count(registry, "watch", str(response.status))
        if response.status != 200:
            raise ApiError.from_body(response.status, response.reason or "", await response.read())
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


class RestKubeAPI:
    """The agent's :class:`agent.api.KubeAPI` (ConfigMap and Event verbs) over one ``ApiClient``.

    Every request goes through :func:`request` (the ``verb`` timeout),
    counted on ``registry`` (default: the daemon's).
    """

    def __init__(self, client: ApiClient, *, registry: CollectorRegistry | None = None) -> None:
        self._client = client
        self._registry = registry
        self._instance = pod_name()
        #: The write fence (``LeaderElector.may_write`` under leader election): ConfigMap
        #: writes and pod patches are refused, without a request, while it says False.
        self.may_write: Callable[[], bool] = lambda: True

    def _fence(self, what: str) -> None:
        if not self.may_write():
            raise NotLeader(f"{what}: refused, this process no longer holds the leader Lease")

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Json | None = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Json:
        """One JSON request (:func:`request`); fits :class:`ringcontroller.leader.RequestFunc`."""
        return await request(
            self._client, method, path, body=body, query=query or (), content_type=content_type, registry=self._registry
        )

    async def get_configmap(self, namespace: str, name: str) -> Json | None:
        try:
            return await self.request("GET", CONFIGMAPS.path(namespace, name))
        except NotFound:
            return None

    async def create_configmap(self, namespace: str, body: Json) -> Json:
        self._fence(f"create ConfigMap {namespace}/{body.get('metadata', {}).get('name', '?')}")
        return await self.request("POST", CONFIGMAPS.path(namespace), body=body)

    async def replace_configmap(self, namespace: str, name: str, body: Json) -> Json:
        self._fence(f"update ConfigMap {namespace}/{name}")
        return await self.request("PUT", CONFIGMAPS.path(namespace, name), body=body)

    async def annotate_pod(self, namespace: str, name: str, *, uid: str, annotations: dict[str, str]) -> None:
        """A JSON merge patch of the pod's annotations; its ``metadata.uid`` is a
        precondition (the server answers 409 when the name now holds another pod)."""
        self._fence(f"patch pod {namespace}/{name}")
        await self.request(
            "PATCH",
            PODS.path(namespace, name),
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
            await self.request("POST", EVENTS.path(namespace), body=body)
        except Exception as e:  # noqa: BLE001 - an Event is best effort
            log.warning("event.failed", reason=reason, error=str(e))
