"""The reflector against the real local control plane, in a fresh namespace per test.

Covers: a paginated list with a small page size and a label selector; a
watch that sees adds, updates (only when the slim record changes), deletes
and objects leaving the selector; watch restarts after the server ends the
stream (tiny ``timeoutSeconds``) without relisting; a watch from an expired
resourceVersion (410, after etcd compaction) that relists and reports what
changed meanwhile; and a continue token that expires mid-list because etcd
was compacted (as the API server does every five minutes), which falls back
to one unpaginated list.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api
from prometheus_client import CollectorRegistry

from agent.api import Gone
from ranktable.backoff import Backoff
from ringcontroller import kube
from ringcontroller.kube import CONFIGMAPS, Json, Resource
from ringcontroller.reflector import Reflector
from ringdevcluster import Cluster
from tests.support.kubehelp import wait_for_async

pytestmark = pytest.mark.integration

SELECTOR_KEY = "ring-test/reflector"
TIMEOUT = 20.0


@dataclass(frozen=True)
class CM:
    name: str
    value: str


def slim(raw: Json) -> CM | None:
    data = raw.get("data") or {}
    return CM(raw["metadata"]["name"], data.get("v", ""))


@contextlib.asynccontextmanager
async def connect(kubeconfig: Path) -> AsyncIterator[ApiClient]:
    configuration = Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with ApiClient(configuration) as api:
        yield api


def configmap(name: str, value: str, *, selected: bool = True) -> Json:
    labels = {SELECTOR_KEY: "yes"} if selected else {"other": "yes"}
    return {"metadata": {"name": name, "labels": labels}, "data": {"v": value}}


class Events:
    """Handler calls, awaitable one at a time."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.all: list[tuple[Any, ...]] = []

    def _put(self, *event: Any) -> None:
        self.all.append(event)
        self.queue.put_nowait(event)

    def on_add(self, key: str, new: Any) -> None:
        self._put("add", key, new)

    def on_update(self, key: str, old: Any, new: Any) -> None:
        self._put("update", key, old, new)

    def on_delete(self, key: str, old: Any) -> None:
        self._put("delete", key, old)

    async def next(self) -> tuple[Any, ...]:
        return await asyncio.wait_for(self.queue.get(), TIMEOUT)

    def drain(self) -> list[tuple[Any, ...]]:
        out = []
        while not self.queue.empty():
            out.append(self.queue.get_nowait())
        return out


def new_reflector(
    api: ApiClient, namespace: str, events: Events, registry: CollectorRegistry, **kwargs: Any
) -> Reflector[CM]:
    return Reflector(
        api,
        CONFIGMAPS,
        transform=slim,
        namespace=namespace,
        label_selector=SELECTOR_KEY,  # exists-on-key, as the controller selects pods
        indexers={"value": lambda cm: [cm.value]},
        on_add=events.on_add,
        on_update=events.on_update,
        on_delete=events.on_delete,
        registry=registry,
        backoff=Backoff(initial=0.05, cap=0.5),
        **kwargs,
    )


@contextlib.asynccontextmanager
async def running(reflector: Reflector[Any]) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.has_synced.wait(), TIMEOUT)
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert task.cancelled()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_paginated_list_then_watch_adds_updates_deletes(kubeconfig: Path, namespace: str) -> None:
    async with connect(kubeconfig) as api:
        core: Any = CoreV1Api(api)  # dict bodies: the generated stubs only name models
        for i in range(7):
            await core.create_namespaced_config_map(namespace, configmap(f"cm-{i}", f"v{i}"))
        await core.create_namespaced_config_map(namespace, configmap("unselected", "x", selected=False))

        events, registry = Events(), CollectorRegistry()
        reflector = new_reflector(api, namespace, events, registry, page_size=2)
        async with running(reflector):
            assert reflector.store.keys() == [f"{namespace}/cm-{i}" for i in range(7)]
            assert sample(registry, "ringcontroller_api_requests_total", verb="list", code="200") == 4  # 2+2+2+1
            assert sorted(e[1] for e in events.drain()) == reflector.store.keys()
            assert reflector.store.by_index("value", "v3") == [CM("cm-3", "v3")]

            await core.create_namespaced_config_map(namespace, configmap("late", "new"))
            assert await events.next() == ("add", f"{namespace}/late", CM("late", "new"))

            # An annotation is not in the slim record: no update reaches the handlers.
            await core.patch_namespaced_config_map("cm-0", namespace, {"metadata": {"annotations": {"a": "b"}}})
            await core.patch_namespaced_config_map("cm-0", namespace, {"data": {"v": "changed"}})
            assert await events.next() == ("update", f"{namespace}/cm-0", CM("cm-0", "v0"), CM("cm-0", "changed"))
            assert reflector.store.by_index("value", "v0") == []

            await core.delete_namespaced_config_map("cm-1", namespace)
            assert await events.next() == ("delete", f"{namespace}/cm-1", CM("cm-1", "v1"))

            # Leaving the label selector is a delete for the watcher.
            await core.patch_namespaced_config_map("cm-2", namespace, {"metadata": {"labels": {SELECTOR_KEY: None}}})
            assert await events.next() == ("delete", f"{namespace}/cm-2", CM("cm-2", "v2"))

            # The unselected ConfigMap never shows up.
            await core.patch_namespaced_config_map("unselected", namespace, {"data": {"v": "y"}})
            await core.create_namespaced_config_map(namespace, configmap("marker", "m"))
            assert await events.next() == ("add", f"{namespace}/marker", CM("marker", "m"))
            assert f"{namespace}/unselected" not in reflector.store
            assert sample(registry, "ringcontroller_relists_total", resource="configmaps") == 0


async def test_watch_resumes_after_server_timeout_without_relisting(kubeconfig: Path, namespace: str) -> None:
    async with connect(kubeconfig) as api:
        core: Any = CoreV1Api(api)  # dict bodies: the generated stubs only name models
        events, registry = Events(), CollectorRegistry()
        # The server ends each watch after 2 s; the reflector re-opens it.
        reflector = new_reflector(api, namespace, events, registry, watch_timeout=(2.0, 2.0))
        async with running(reflector):
            await wait_for_async(
                lambda: sample(registry, "ringcontroller_watch_restarts_total", resource="configmaps") >= 2,
                timeout=TIMEOUT,
                what="two watch restarts",
            )
            await core.create_namespaced_config_map(namespace, configmap("after-restarts", "a"))
            assert await events.next() == ("add", f"{namespace}/after-restarts", CM("after-restarts", "a"))
            assert sample(registry, "ringcontroller_relists_total", resource="configmaps") == 0
            assert sample(registry, "ringcontroller_api_requests_total", verb="list", code="200") == 1
            assert sample(registry, "ringcontroller_api_requests_total", verb="watch", code="200") >= 3


async def test_silent_stream_is_abandoned_after_idle_timeout(kubeconfig: Path, namespace: str) -> None:
    async with connect(kubeconfig) as api:
        core: Any = CoreV1Api(api)  # dict bodies: the generated stubs only name models
        events, registry = Events(), CollectorRegistry()
        # The server would keep the watch open for a minute; nothing happens in
        # the namespace, so the client-side read timeout ends it first: two
        # restarts within the wait's 20 s can only come from the idle timeout.
        reflector = new_reflector(api, namespace, events, registry, watch_timeout=(60.0, 60.0), idle_timeout=0.5)
        async with running(reflector):
            started = asyncio.get_running_loop().time()
            await wait_for_async(
                lambda: sample(registry, "ringcontroller_watch_restarts_total", resource="configmaps") >= 2,
                timeout=TIMEOUT,
                what="two watch restarts",
            )
            print(
                f"\nFIGURE two idle-timeout watch restarts (0.5s idle): {asyncio.get_running_loop().time() - started:.2f}s"
            )
            await core.create_namespaced_config_map(namespace, configmap("after-idle", "a"))
            assert await events.next() == ("add", f"{namespace}/after-idle", CM("after-idle", "a"))
            assert sample(registry, "ringcontroller_relists_total", resource="configmaps") == 0


# Core Events are the resource the API server does not serve from its watch
# cache (their cache size is 0 by default): their lists and watches go to etcd,
# so compacting etcd really expires resourceVersions and continue tokens, as
# it does for every resource in a cluster that has run for a while.
EVENTS = Resource("", "v1", "events")


@dataclass(frozen=True)
class Ev:
    name: str
    message: str


def slim_event(raw: Json) -> Ev | None:
    return Ev(raw["metadata"]["name"], raw.get("message", ""))


def event(namespace: str, name: str, message: str) -> Json:
    return {
        "metadata": {"name": name, "labels": {SELECTOR_KEY: "yes"}},
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": namespace, "apiVersion": "v1"},
        "reason": "Test",
        "message": message,
        "type": "Normal",
    }


def compact_etcd(cluster: Cluster) -> int:
    """Compact etcd at its current revision, as kube-apiserver does every 5 minutes."""
    base = f"http://127.0.0.1:{cluster.ports['etcd']}/v3"

    def post(path: str, body: Json) -> Json:
        request = urllib.request.Request(
            base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            result: Json = json.loads(response.read())
            return result

    revision = int(post("/kv/range", {"key": base64.b64encode(b"/registry/").decode()})["header"]["revision"])
    post("/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


class CompactedBeforeFirstWatch(Reflector[Ev]):
    """Before its first watch, runs ``meanwhile`` (changes the watch will miss)
    and then compacts etcd past the list's resourceVersion."""

    def __init__(self, *args: Any, meanwhile: Callable[[], Awaitable[None]], cluster: Cluster, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._meanwhile: Callable[[], Awaitable[None]] | None = meanwhile
        self._cluster = cluster
        self.first_watch_error: BaseException | None = None

    async def watch_once(self, resource_version: str) -> str:
        if self._meanwhile is None:
            return await super().watch_once(resource_version)
        meanwhile, self._meanwhile = self._meanwhile, None
        await meanwhile()
        assert compact_etcd(self._cluster) > int(resource_version)
        try:
            return await super().watch_once(resource_version)
        except BaseException as e:
            self.first_watch_error = e
            raise


async def test_watch_from_compacted_resource_version_relists_and_reports_missed_changes(
    kubeconfig: Path, namespace: str, devcluster: Cluster
) -> None:
    async with connect(kubeconfig) as api:
        core: Any = CoreV1Api(api)  # dict bodies: the generated stubs only name models
        for name in ("keep", "doomed", "edited"):
            await core.create_namespaced_event(namespace, event(namespace, name, "0"))

        async def meanwhile() -> None:
            await core.delete_namespaced_event("doomed", namespace)
            await core.patch_namespaced_event("edited", namespace, {"message": "1"})
            await core.create_namespaced_event(namespace, event(namespace, "born", "0"))

        events, registry = Events(), CollectorRegistry()
        reflector = CompactedBeforeFirstWatch(
            api,
            EVENTS,
            transform=slim_event,
            namespace=namespace,
            label_selector=SELECTOR_KEY,
            on_add=events.on_add,
            on_update=events.on_update,
            on_delete=events.on_delete,
            registry=registry,
            backoff=Backoff(initial=0.05, cap=0.5),
            meanwhile=meanwhile,
            cluster=devcluster,
        )
        async with running(reflector):
            initial = [e[:2] for e in events.drain()]
            assert sorted(initial) == [("add", f"{namespace}/{n}") for n in ("doomed", "edited", "keep")]
            await wait_for_async(
                lambda: sample(registry, "ringcontroller_relists_total", resource="events") == 1,
                timeout=TIMEOUT,
                what="the relist",
            )
            error = reflector.first_watch_error
            assert isinstance(error, Gone), repr(error)
            # The relist's diff: the delete we missed ("DeletedFinalStateUnknown"),
            # the update and the add.
            assert sorted(events.drain()) == [
                ("add", f"{namespace}/born", Ev("born", "0")),
                ("delete", f"{namespace}/doomed", Ev("doomed", "0")),
                ("update", f"{namespace}/edited", Ev("edited", "0"), Ev("edited", "1")),
            ]
            assert reflector.store.keys() == [f"{namespace}/{n}" for n in ("born", "edited", "keep")]
            # And it watches again afterwards.
            await core.create_namespaced_event(namespace, event(namespace, "later", "0"))
            assert await events.next() == ("add", f"{namespace}/later", Ev("later", "0"))


async def test_expired_continue_token_falls_back_to_one_full_list(
    kubeconfig: Path, namespace: str, devcluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with connect(kubeconfig) as api:
        core: Any = CoreV1Api(api)  # dict bodies: the generated stubs only name models
        for i in range(5):
            await core.create_namespaced_event(namespace, event(namespace, f"e-{i}", "0"))

        real_get_json = kube.get_json
        pages: list[tuple[str, ...]] = []

        async def get_json_compacting_after_first_page(*args: Any, **kwargs: Any) -> Json:
            query = dict(kwargs.get("query", ()))
            pages.append(tuple(sorted(k for k in query if k in ("limit", "continue"))))
            result = await real_get_json(*args, **kwargs)
            if len(pages) == 1:
                # Between two pages: a write, then compaction past the snapshot
                # the continue token refers to.
                await core.create_namespaced_event(namespace, event(namespace, "between-pages", "0"))
                compact_etcd(devcluster)
            return result

        monkeypatch.setattr(kube, "get_json", get_json_compacting_after_first_page)

        events, registry = Events(), CollectorRegistry()
        reflector: Reflector[Ev] = Reflector(
            api,
            EVENTS,
            transform=slim_event,
            namespace=namespace,
            label_selector=SELECTOR_KEY,
            on_add=events.on_add,
            registry=registry,
            page_size=2,
        )
        task = asyncio.create_task(reflector.run())
        try:
            await asyncio.wait_for(reflector.has_synced.wait(), TIMEOUT)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert pages == [("limit",), ("continue", "limit"), ()]
        assert sample(registry, "ringcontroller_api_requests_total", verb="list", code="410") == 1
        assert sample(registry, "ringcontroller_api_requests_total", verb="list", code="200") == 2
        # One consistent snapshot, including the write made between pages.
        assert reflector.store.keys() == sorted(
            [f"{namespace}/e-{i}" for i in range(5)] + [f"{namespace}/between-pages"]
        )
        assert len(events.all) == 6
