"""List/watch reflector and local store, client-go style, on kubernetes-asyncio.

A ``Reflector`` keeps a ``Store`` of one resource type (pods with a label,
Volcano Jobs, ...) in step with the API server and tells handlers about
every change. The protocol is client-go's reflector:

1. List, paginated (``limit``/``continue``). If a continue token expires
   (410) mid-way, list again in one unpaginated request, as client-go's
   pager does, so the result is one consistent snapshot.
2. Replace the store with the listed objects and tell the handlers the
   difference: adds, updates, and deletes for objects that vanished while we
   were not watching (client-go's "DeletedFinalStateUnknown"). ``has_synced``
   is set after the first list.
3. Watch from the list's resourceVersion with ``allowWatchBookmarks``. The
   server ends the watch after a random 4-8 minutes (``timeoutSeconds``, so
   a fleet of controllers does not reconnect in step); the client gives up
   on its own shortly after that, and after ``idle_timeout`` seconds without
   a byte, so a half-open connection cannot hang the reflector. On a quiet
   watch of a resource served from the watch cache (pods, CRDs) the server
   sends a bookmark about every 60 s and one just before it closes the watch
   (measured on v1.35), hence the 150 s default; resources it serves from
   etcd directly (core Events) get none, so a quiet watch of those is
   re-opened every ``idle_timeout``, harmlessly.
4. When a watch ends, watch again from the last resourceVersion seen (an
   event or a bookmark): no relist. On 410 Gone (HTTP or an ERROR event: the
   version left the server's window) relist from step 1. On any other error
   back off (0.8 s doubling to 30 s, plus up to 100 % jitter, reset after
   two quiet minutes) and retry the step that failed.

The loop is ours: ``kubernetes_asyncio.watch`` retries a 410 once and then
raises, which is not a policy a daemon can live with.

Objects are reduced by ``transform(raw) -> record | None`` before they are
stored: the store holds slim records (only the fields the controller reads),
keyed ``namespace/name`` (``name`` for cluster-scoped objects). ``None``
means "not of interest": the object is not stored, and if an earlier version
was, that is reported as a delete. Handlers are called with records, after
the store has been updated, and only when the record changed (records should
compare by value, e.g. frozen dataclasses; then status churn in fields the
controller does not read never reaches it).

Everything runs on one event loop. Handlers must be quick synchronous
callables that only enqueue keys (``WorkQueue.add``): no I/O, no awaiting,
no decisions. An exception in a handler is logged and does not stop the
reflector.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import structlog
from prometheus_client import CollectorRegistry

from agent.api import ApiError, Gone
from model.records import key_of
from ranktable.backoff import Backoff
from ringcontroller import kube
from ringcontroller.kube import ApiClient, Json, Resource
from ringcontroller.metrics import client_metrics

__all__ = [
    "Diff",
    "IndexFunc",
    "Mirror",
    "Reflector",
    "ShortWatchError",
    "Store",
    "diff_records",
]

R = TypeVar("R")

IndexFunc = Callable[[R], Iterable[str]]
"""Maps a record to the index values it is filed under (none, one or several)."""

log = structlog.get_logger()

WATCH_DEADLINE_GRACE = 30.0
"""Seconds past the server-side ``timeoutSeconds`` before the client gives up on a watch."""

SHORT_WATCH = 1.0
"""A watch the server ends within this many seconds without any event counts as
an error (backoff), so a misbehaving server or proxy cannot make us spin."""


class ShortWatchError(Exception):
    """The server closed a watch almost at once without sending anything."""


class Store(Generic[R]):
    """Slim records by key, with optional named indexes. Read-only for callers.

    Only the owning ``Reflector`` writes it. Readers (a controller's sync)
    use ``get``, ``store[key]``, ``in``, ``list``, ``keys`` and ``by_index``;
    every list returned is a snapshot, so callers may iterate it while the
    store changes.
    Index functions must be pure: a record must map to the same values when
    it is removed as when it was added.
    """

    def __init__(self, indexers: Mapping[str, IndexFunc[R]] | None = None) -> None:
        self._items: dict[str, R] = {}
        self._indexers: dict[str, IndexFunc[R]] = dict(indexers or {})
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

    def get(self, key: str) -> R | None:
        """The record stored under ``key``, or None."""
        return self._items.get(key)

    def list(self) -> list[R]:
        """All records, in key order."""
        return [self._items[k] for k in sorted(self._items)]

    def keys(self) -> builtins.list[str]:
        """All keys, sorted."""
        return sorted(self._items)

    def by_index(self, index: str, value: str) -> builtins.list[R]:
        """Records whose index function for ``index`` yields ``value``, in key order.

        Raises ``KeyError`` for an index that was not configured.
        """
        keys = self._indices[index].get(value, ())
        return [self._items[k] for k in sorted(keys)]

    def index_values(self, index: str) -> builtins.list[str]:
        """The values currently present in ``index``, sorted."""
        return sorted(self._indices[index])

    def snapshot(self) -> dict[str, R]:
        """A shallow copy of the key -> record mapping."""
        return dict(self._items)

    def __getitem__(self, key: str) -> R:
        return self._items[key]

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    # -- writes: the reflector only ---------------------------------------

    def put(self, key: str, record: R) -> R | None:
        """Store ``record`` under ``key``; returns the record it replaced."""
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = record
        self._index(key, record)
        return old

    def delete(self, key: str) -> R | None:
        """Remove ``key``; returns the record removed, or None."""
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def replace(self, records: Mapping[str, R]) -> None:
        """Make the store hold exactly ``records``."""
        self._items = dict(records)
        self._indices = {name: {} for name in self._indexers}
        for key, record in self._items.items():
            self._index(key, record)

    def _index(self, key: str, record: R) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(record):
                index.setdefault(value, set()).add(key)

    def _unindex(self, key: str, record: R) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(record):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]


@dataclass
class Diff(Generic[R]):
    """What changed between two snapshots, each list in key order."""

    added: list[tuple[str, R]] = field(default_factory=list)
    updated: list[tuple[str, R, R]] = field(default_factory=list)  # key, old, new
    deleted: list[tuple[str, R]] = field(default_factory=list)  # key, last known record


def diff_records(old: Mapping[str, R], new: Mapping[str, R]) -> Diff[R]:
    """The changes that turn ``old`` into ``new``; equal records are not updates."""
    diff: Diff[R] = Diff()
    for key in sorted(new):
        record = new[key]
        if key not in old:
            diff.added.append((key, record))
        elif old[key] != record:
            diff.updated.append((key, old[key], record))
    for key in sorted(old):
        if key not in new:
            diff.deleted.append((key, old[key]))
    return diff


class Mirror(Generic[R]):
    """A ``Store`` plus the handlers told about its changes; no I/O.

    The ``Reflector`` feeds it whole lists (``replace``) and watch events
    (``apply``). See the module docstring for the handler contract.
    """

    def __init__(
        self,
        *,
        transform: Callable[[Json], R | None],
        indexers: Mapping[str, IndexFunc[R]] | None = None,
        on_add: Callable[[str, R], None] | None = None,
        on_update: Callable[[str, R, R], None] | None = None,
        on_delete: Callable[[str, R], None] | None = None,
        resource: str = "",
    ) -> None:
        self.store: Store[R] = Store(indexers)
        self._transform = transform
        self._on_add = on_add
        self._on_update = on_update
        self._on_delete = on_delete
        self._log = log.bind(resource=resource)

    def slim(self, raw: Json) -> R | None:
        """``transform(raw)``; a transform that raises is logged and counts as None."""
        try:
            return self._transform(raw)
        except Exception:  # noqa: BLE001 - a bad object is logged; the mirror keeps running
            self._log.exception("transform.error", key=key_of(raw))
            return None

    def replace(self, records: Mapping[str, R]) -> Diff[R]:
        """Make the store hold ``records`` (already slim) and report the difference."""
        diff = diff_records(self.store.snapshot(), records)
        self.store.replace(records)
        for key, record in diff.added:
            self._call(self._on_add, key, record)
        for key, old, new in diff.updated:
            self._call(self._on_update, key, old, new)
        for key, old in diff.deleted:
            self._call(self._on_delete, key, old)
        return diff

    def apply(self, event_type: str, raw: Json) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED`` or ``DELETED``) of ``raw``."""
        key = key_of(raw)
        if event_type == "DELETED":
            old = self.store.delete(key)
            if old is not None:
                self._call(self._on_delete, key, old)
            return
        record = self.slim(raw)
        if record is None:
            old = self.store.delete(key)
            if old is not None:
                self._call(self._on_delete, key, old)
            return
        old = self.store.put(key, record)
        if old is None:
            self._call(self._on_add, key, record)
        elif old != record:
            self._call(self._on_update, key, old, record)

    def _call(self, handler: Callable[..., None] | None, key: str, *records: R) -> None:
        if handler is None:
            return
        try:
            handler(key, *records)
        except Exception:  # noqa: BLE001 - a failing handler is logged; the mirror keeps running
            self._log.exception("handler.error", key=key)


class Reflector(Generic[R]):
    """Keeps ``store`` in step with one resource on the API server (see module docstring).

    Usage::

        pods = Reflector(api, kube.PODS, transform=pod_record,
                         label_selector="ring-controller.atlas",
                         indexers={"job": lambda p: [p.job_key]},
                         on_add=..., on_update=..., on_delete=...)
        task = asyncio.create_task(pods.run())
        await pods.has_synced.wait()
        ...
        task.cancel()

    ``run`` never returns; cancel its task to stop (the open response is
    closed). Start workers only after ``has_synced`` is set, so the first
    syncs see a complete store. ``namespace=None`` watches all namespaces.
    ``metadata_only``: list and watch PartialObjectMetadata (the objects'
    metadata, no spec or status), for a transform that reads only metadata.
    The reflector does not own ``api``; the caller closes it.

    ``list_once`` and ``watch_once`` are the two steps ``run`` is made of;
    they are public for tests and tools and must not be used concurrently
    with ``run``.
    """

    def __init__(
        self,
        api: ApiClient,
        resource: Resource,
        *,
        transform: Callable[[Json], R | None],
        namespace: str | None = None,
        label_selector: str | None = None,
        indexers: Mapping[str, IndexFunc[R]] | None = None,
        on_add: Callable[[str, R], None] | None = None,
        on_update: Callable[[str, R, R], None] | None = None,
        on_delete: Callable[[str, R], None] | None = None,
        page_size: int = 500,
        watch_timeout: tuple[float, float] = (240.0, 480.0),
        idle_timeout: float | None = 150.0,
        backoff: Backoff | None = None,
        registry: CollectorRegistry | None = None,
        rand: Callable[[], float] = random.random,
        metadata_only: bool = False,
    ) -> None:
        self.resource = resource
        self._metadata_only = metadata_only
        self.namespace = namespace
        self.label_selector = label_selector
        self.has_synced = asyncio.Event()
        """Set once the first list is in the store (and its handlers ran)."""
        self.resource_version: str | None = None
        """The last resourceVersion seen (list, event or bookmark): where the next
        watch starts. None before the first list and while a relist is due."""
        self._api = api
        self._mirror: Mirror[R] = Mirror(
            transform=transform,
            indexers=indexers,
            on_add=on_add,
            on_update=on_update,
            on_delete=on_delete,
            resource=str(resource),
        )
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._idle_timeout = idle_timeout
        self._backoff = backoff if backoff is not None else Backoff()
        self._registry = registry
        self._rand = rand
        self._lists = 0
        metrics = client_metrics(registry)
        self._m_restarts = metrics.watch_restarts.labels(str(resource))
        self._m_relists = metrics.relists.labels(str(resource))
        self._m_events = {
            t: metrics.watch_events.labels(str(resource), t) for t in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
        }
        self._log = log.bind(resource=str(resource), namespace=namespace or "*")

    @property
    def store(self) -> Store[R]:
        """The records; read-only for everyone but this reflector."""
        return self._mirror.store

    # -- the loop ------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch, forever; relist on 410, back off on errors. Cancel to stop."""
        rewatch = False  # True when the next watch resumes after an ended one
        while True:
            try:
                resource_version = self.resource_version
                if resource_version is None:
                    resource_version = await self.list_once()
                    rewatch = False
                if rewatch:
                    self._m_restarts.inc()
                rewatch = True
                self.resource_version = await self.watch_once(resource_version)
                self._log.debug("watch.restart", reason="closed", resource_version=self.resource_version)
            except Exception as e:  # noqa: BLE001 - 410, network, timeout, malformed answer: retry
                # A failed watch resumes from the last version it saw (watch_once
                # keeps self.resource_version current event by event).
                listing = self.resource_version is None
                delay = self._backoff.next_delay()
                if isinstance(e, Gone) and not listing:
                    self._log.info(
                        "watch.gone",
                        resource_version=self.resource_version,
                        message=e.message,
                        relist_in=round(delay, 2),
                    )
                    self.resource_version = None
                else:
                    self._log.warning(
                        "list.error" if listing else "watch.error",
                        error=f"{type(e).__name__}: {e}",
                        retry_in=round(delay, 2),
                    )
                await asyncio.sleep(delay)

    # -- step 1+2: list --------------------------------------------------------

    async def list_once(self) -> str:
        """List everything, replace the store, call the handlers; returns the resourceVersion."""
        started = time.monotonic()
        records, resource_version, pages = await self._list()
        diff = self._mirror.replace(records)
        self._lists += 1
        if self._lists > 1:
            self._m_relists.inc()
        self.resource_version = resource_version
        self._log.info(
            "list.done",
            objects=len(records),
            pages=pages,
            added=len(diff.added),
            updated=len(diff.updated),
            deleted=len(diff.deleted),
            resource_version=resource_version,
            seconds=round(time.monotonic() - started, 3),
        )
        if not self.has_synced.is_set():
            self.has_synced.set()
        return resource_version

    async def _list(self) -> tuple[dict[str, R], str, int]:
        path = self.resource.path(self.namespace)
        limit: int | None = self._page_size
        records: dict[str, R] = {}
        token: str | None = None
        pages = 0
        while True:
            query = self._selector_query()
            if limit:
                query.append(("limit", str(limit)))
            if token:
                query.append(("continue", token))
            try:
                page = await kube.get_json(
                    self._api,
                    path,
                    verb="list",
                    query=query,
                    registry=self._registry,
                    accept=kube.METADATA_LIST if self._metadata_only else "application/json",
                )
            except Gone:
                if not token:
                    raise
                # The snapshot our token points to was compacted: one
                # unpaginated list gives a consistent view again.
                self._log.info("list.continue_expired", pages=pages)
                records, token, limit = {}, None, None
                continue
            pages += 1
            for raw in page.get("items") or ():
                record = self._mirror.slim(raw)
                if record is not None:
                    records[key_of(raw)] = record
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                return records, str(meta.get("resourceVersion") or ""), pages

    # -- step 3: watch -----------------------------------------------------------

    async def watch_once(self, resource_version: str) -> str:
        """One watch from ``resource_version``; returns the last version seen when it ends.

        Applies every event to the store (calling the handlers) as it
        arrives, and keeps ``self.resource_version`` at the last version
        seen, so a watch that fails midway can be resumed from there. Raises :class:`~agent.api.ApiError` (:class:`~agent.api.Gone` on 410) if the server
        refuses the watch or sends an ERROR event, ``TimeoutError`` if the
        stream stalls or outlives its deadline, ``ShortWatchError`` if the
        server closed it at once without an event, and transport errors as
        they come.
        """
        low, high = self._watch_timeout
        timeout_seconds = max(1, int(low + (high - low) * self._rand()))
        query = self._selector_query() + [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        self._log.debug("watch.start", resource_version=resource_version, timeout_seconds=timeout_seconds)
        started = time.monotonic()
        received = 0
        async with asyncio.timeout(timeout_seconds + WATCH_DEADLINE_GRACE):
            async with kube.open_watch(
                self._api,
                self.resource.path(self.namespace),
                query=query,
                idle_timeout=self._idle_timeout,
                registry=self._registry,
                accept=kube.METADATA_WATCH if self._metadata_only else "application/json",
            ) as events:
                async for event in events:
                    received += 1
                    resource_version = self._handle(event, resource_version)
        if received == 0 and time.monotonic() - started < SHORT_WATCH:
            raise ShortWatchError(f"watch closed after {time.monotonic() - started:.3f}s without events")
        return resource_version

    def _handle(self, event: Json, resource_version: str) -> str:
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            raise ValueError(f"watch event without an object: {json.dumps(event)[:200]}")
        if kind == "ERROR":
            raise ApiError.from_status(raw)
        counter = self._m_events.get(str(kind))
        if counter is not None:
            counter.inc()
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._mirror.apply(kind, raw)
        elif kind != "BOOKMARK":
            self._log.warning("watch.unknown_event", type=kind)
            return resource_version
        new_version = (raw.get("metadata") or {}).get("resourceVersion")
        if new_version:
            resource_version = str(new_version)
            self.resource_version = resource_version
        return resource_version

    def _selector_query(self) -> list[tuple[str, str]]:
        return [("labelSelector", self.label_selector)] if self.label_selector else []
