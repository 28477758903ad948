"""Small sync helpers for integration tests on the real control plane."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from ranktable.stored import files_from_configmap
from tests.support.factories import volcano_pod

T = TypeVar("T")
Json = dict[str, Any]


def fresh_namespace_name(test_name: str) -> str:
    """A fresh namespace name for test ``test_name`` (slug plus random suffix)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{slug}-{secrets.token_hex(3)}"


def create_namespace(
    k8s: Any, name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> str:
    """Create namespace ``name`` (test-labelled) and return once its ``default`` ServiceAccount exists.

    The ServiceAccount admission plugin rejects pods until then.
    """
    k8s.core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=name, labels={"ring-controller.test/ns": "true", **(labels or {})}, annotations=annotations
            )
        )
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            k8s.core.read_namespaced_service_account("default", name)
            return name
        except ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def delete_namespace(k8s: Any, name: str) -> None:
    """Delete namespace ``name`` without waiting; gone already is fine."""
    try:
        k8s.core.delete_namespace(name, propagation_policy="Background")
    except ApiException as err:
        if err.status != 404:
            raise


def wait_for(fn: Callable[[], T | None], *, timeout: float = 60.0, interval: float = 0.1, what: str = "condition") -> T:
    """Poll ``fn`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


async def wait_for_async(
    predicate: Callable[[], object], *, timeout: float = 60.0, interval: float = 0.05, what: str = "condition"
) -> None:
    """:func:`wait_for` for asyncio tests: poll ``predicate`` between sleeps of the event loop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


def create_volcano_job(k8s: Any, namespace: str, job: Json) -> Json:
    """Create the Volcano Job; returns it as stored (with its uid)."""
    job = json.loads(json.dumps(job))
    job["metadata"]["namespace"] = namespace
    job.pop("status", None)
    return k8s.custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job)  # type: ignore[no-any-return]


def set_job_version(k8s: Any, namespace: str, name: str, version: int) -> Json:
    """Set ``status.version`` through the status subresource, as Volcano does on restart."""
    return k8s.custom.patch_namespaced_custom_object_status(  # type: ignore[no-any-return]
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", name, {"status": {"version": version}}
    )


def create_pods(k8s: Any, job: Json, members: list[tuple[str, int]], *, version: int = 0, **kw: Any) -> list[Json]:
    """Create pods for ``members`` [(task, index)] the way Volcano's job controller does."""
    out = []
    for task, index in members:
        body = volcano_pod(job, task=task, index=index, version=version, **kw)
        out.append(
            k8s.api.sanitize_for_serialization(k8s.core.create_namespaced_pod(job["metadata"]["namespace"], body))
        )
    return out


def all_members(job: Json) -> list[tuple[str, int]]:
    """Every (task, index) of a Volcano Job, in spec order."""
    return [(t["name"], i) for t in job["spec"]["tasks"] for i in range(t["replicas"])]


def running_pods(k8s: Any, namespace: str, names: list[str]) -> dict[str, Json] | None:
    """The pods by name if all are Running with an IP, else None."""
    out = {}
    for name in names:
        pod = k8s.core.read_namespaced_pod(name, namespace)
        if pod.status.phase != "Running" or not pod.status.pod_ip:
            return None
        out[name] = pod
    return out


def read_configmap(k8s: Any, namespace: str, name: str) -> Any | None:
    """The ConfigMap, or None."""
    try:
        return k8s.core.read_namespaced_config_map(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def read_spec(k8s: Any, namespace: str, name: str) -> Json | None:
    """``cluster.json`` of ConfigMap ``name`` parsed, or None."""
    cm = read_configmap(k8s, namespace, name)
    if cm is None:
        return None
    files = files_from_configmap({"data": cm.data or {}, "binaryData": cm.binary_data or {}})  # either form
    return json.loads(files["cluster.json"]) if "cluster.json" in files else None  # type: ignore[no-any-return]


def wait_spec(
    k8s: Any,
    namespace: str,
    name: str,
    *,
    status: str = "completed",
    timeout: float = 60.0,
    where: Callable[[Json], bool] = lambda s: True,
) -> Json:
    """Wait until ``cluster.json`` has ``status`` (and ``where`` holds)."""

    def check() -> Json | None:
        spec = read_spec(k8s, namespace, name)
        return spec if spec and spec["status"] == status and where(spec) else None

    return wait_for(check, timeout=timeout, what=f"ConfigMap {namespace}/{name} {status}")


def events_for(k8s: Any, namespace: str, name: str) -> list[Any]:
    """Events whose involved object is named ``name``."""
    return [e for e in k8s.core.list_namespaced_event(namespace).items if e.involved_object.name == name]


class Watcher:
    """Watches one kind of object in a namespace from a thread and hands every object an event carries to ``handle``.

    ``lister`` is the sync client's list call (``k8s.core.list_namespaced_pod``);
    extra keyword arguments (``field_selector=...``) go to it. The watch is
    re-opened every ``timeout_seconds`` and after an error (``retry`` seconds
    later) until :meth:`stop`. ``handle`` runs on the watch thread, at receive
    time: start the watcher before creating what it should see.
    """

    def __init__(
        self,
        lister: Callable[..., Any],
        namespace: str,
        handle: Callable[[Any], None],
        *,
        timeout_seconds: int = 5,
        retry: float = 0.2,
        **selectors: str,
    ) -> None:
        self._lister, self._namespace, self._handle = lister, namespace, handle
        self._timeout, self._retry, self._selectors = timeout_seconds, retry, selectors
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(self._lister, self._namespace, timeout_seconds=self._timeout, **self._selectors):
                    self._handle(ev["object"])
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - keep watching until stopped
                time.sleep(self._retry)
            finally:
                w.stop()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching; wait up to ``timeout`` s for the thread (it leaves at the next event or re-open)."""
        self._stop.set()
        self._thread.join(timeout=timeout)


class SpecRecorder:
    """Watches one ConfigMap in a thread and records every (status, epoch) it shows."""

    def __init__(self, k8s: Any, namespace: str, name: str) -> None:
        self.seen: list[tuple[str, int]] = []
        self._watcher = Watcher(
            k8s.core.list_namespaced_config_map, namespace, self._on_configmap, field_selector=f"metadata.name={name}"
        )

    def _on_configmap(self, cm: Any) -> None:
        data = cm.data or {}
        if "cluster.json" in data:
            spec = json.loads(data["cluster.json"])
            entry = (spec["status"], spec["epoch"])
            if not self.seen or self.seen[-1] != entry:
                self.seen.append(entry)

    def stop(self) -> list[tuple[str, int]]:
        """Stop watching; returns what was seen, in order."""
        self._watcher.stop()
        return self.seen
