"""Pure-logic tests of ringcontroller.reflector, ringcontroller.kube and the API error tree.

Store and index, the relist diff, event application and handler calls, the
backoff schedule, and the run loop's policy (resume after a closed watch,
relist after 410, back off on errors) driven by scripted list/watch
outcomes. Everything that talks to a server is in
tests/integration/test_reflector.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from agent.api import ApiError, Conflict, Gone, NotFound
from model.records import key_of, object_key
from ranktable.backoff import Backoff
from ringcontroller.kube import PODS, Json
from ringcontroller.reflector import Mirror, Reflector, Store, diff_records


@dataclass(frozen=True)
class Rec:
    name: str
    job: str
    ip: str = ""


def raw(name: str, *, ns: str = "ns", job: str = "j1", ip: str = "", rv: str = "1", noise: str = "") -> Json:
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": {"job": job}},
        "status": {"podIP": ip, "noise": noise},
    }


def to_rec(obj: Json) -> Rec | None:
    labels = obj["metadata"].get("labels") or {}
    if "job" not in labels:
        return None
    return Rec(obj["metadata"]["name"], labels["job"], obj["status"].get("podIP", ""))


class Recorder:
    """Handlers that record calls, and check the store was updated first."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.store: Store[Rec] | None = None

    def on_add(self, key: str, new: Rec) -> None:
        assert self.store is not None and self.store.get(key) == new
        self.calls.append(("add", key, new))

    def on_update(self, key: str, old: Rec, new: Rec) -> None:
        assert self.store is not None and self.store.get(key) == new
        self.calls.append(("update", key, old, new))

    def on_delete(self, key: str, old: Rec) -> None:
        assert self.store is not None and key not in self.store
        self.calls.append(("delete", key, old))


def new_mirror(rec: Recorder) -> Mirror[Rec]:
    mirror: Mirror[Rec] = Mirror(
        transform=to_rec,
        indexers={"job": lambda r: [r.job]},
        on_add=rec.on_add,
        on_update=rec.on_update,
        on_delete=rec.on_delete,
    )
    rec.store = mirror.store
    return mirror


# -- kube helpers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "code", "reason", "error_type"),
    [
        (410, b'{"kind":"Status","code":410,"reason":"Expired","message":"too old"}', 410, "Expired", Gone),
        (200, b'{"kind":"Status","code":410,"reason":"Gone","message":"x"}', 410, "Gone", Gone),
        (403, b'{"kind":"Status","code":403,"reason":"Forbidden","message":"no"}', 403, "Forbidden", ApiError),
        (404, b'{"kind":"Status","code":404,"reason":"NotFound","message":"no"}', 404, "NotFound", NotFound),
        (409, b'{"kind":"Status","code":409,"reason":"AlreadyExists","message":"x"}', 409, "AlreadyExists", Conflict),
        (502, b"<html>bad gateway</html>", 502, "Bad Gateway", ApiError),
    ],
    ids=["http-410", "status-410", "forbidden", "not-found", "already-exists", "not-json"],
)
def test_api_error_from_body(status: int, body: bytes, code: int, reason: str, error_type: type[ApiError]) -> None:
    error = ApiError.from_body(status, "Bad Gateway", body)
    assert (error.status, error.reason, type(error)) == (code, reason, error_type)


def test_object_key() -> None:
    """One key rule for the informers' stores and the records' lookups (client-go's namespace/name)."""
    assert key_of(raw("a", ns="x")) == object_key("x", "a") == "x/a"
    assert key_of({"metadata": {"name": "node1"}}) == object_key(None, "node1") == object_key("", "node1") == "node1"


# -- store -----------------------------------------------------------------


def test_store_index_follows_puts_and_deletes() -> None:
    store: Store[Rec] = Store({"job": lambda r: [r.job]})
    store.put("ns/a", Rec("a", "j1"))
    store.put("ns/b", Rec("b", "j1"))
    store.put("ns/c", Rec("c", "j2"))
    assert [r.name for r in store.by_index("job", "j1")] == ["a", "b"]
    assert store.index_values("job") == ["j1", "j2"]

    store.put("ns/b", Rec("b", "j2"))  # moved to another job
    assert [r.name for r in store.by_index("job", "j1")] == ["a"]
    assert [r.name for r in store.by_index("job", "j2")] == ["b", "c"]

    assert store.delete("ns/a") == Rec("a", "j1")
    assert store.delete("ns/a") is None
    assert store.by_index("job", "j1") == []
    assert store.index_values("job") == ["j2"]  # empty values are dropped
    assert store.keys() == ["ns/b", "ns/c"]
    assert len(store) == 2 and "ns/b" in store and "ns/a" not in store
    assert store["ns/b"] == Rec("b", "j2") and store.get("ns/a") is None
    with pytest.raises(KeyError, match="^'ns/a'$"):
        store["ns/a"]


def test_store_multi_valued_and_empty_index() -> None:
    store: Store[Rec] = Store({"ip": lambda r: [r.ip] if r.ip else [], "both": lambda r: [r.name, r.job]})
    store.put("ns/a", Rec("a", "j1"))
    store.put("ns/b", Rec("b", "j1", "10.0.0.1"))
    assert store.index_values("ip") == ["10.0.0.1"]
    assert [r.name for r in store.by_index("both", "j1")] == ["a", "b"]
    assert [r.name for r in store.by_index("both", "a")] == ["a"]
    with pytest.raises(KeyError, match="^'nope'$"):
        store.by_index("nope", "x")


def test_store_replace_rebuilds_index_and_reads_are_snapshots() -> None:
    store: Store[Rec] = Store({"job": lambda r: [r.job]})
    store.put("ns/a", Rec("a", "j1"))
    listed = store.list()
    store.replace({"ns/z": Rec("z", "j9")})
    assert listed == [Rec("a", "j1")]
    assert store.by_index("job", "j1") == []
    assert store.by_index("job", "j9") == [Rec("z", "j9")]
    assert list(store) == ["ns/z"]


# -- relist diff -------------------------------------------------------------


def test_diff_records() -> None:
    old = {"a": Rec("a", "j"), "b": Rec("b", "j"), "c": Rec("c", "j")}
    new = {"b": Rec("b", "j", "1.2.3.4"), "c": Rec("c", "j"), "d": Rec("d", "j")}
    diff = diff_records(old, new)
    assert diff.added == [("d", Rec("d", "j"))]
    assert diff.updated == [("b", Rec("b", "j"), Rec("b", "j", "1.2.3.4"))]
    assert diff.deleted == [("a", Rec("a", "j"))]  # vanished while not watching


def test_diff_of_equal_snapshots_is_empty() -> None:
    snap = {"a": Rec("a", "j")}
    diff = diff_records(snap, dict(snap))
    assert (diff.added, diff.updated, diff.deleted) == ([], [], [])


def test_mirror_replace_calls_handlers_after_store_update() -> None:
    rec = Recorder()
    mirror = new_mirror(rec)
    mirror.replace({"ns/a": Rec("a", "j1"), "ns/b": Rec("b", "j1")})
    mirror.replace({"ns/b": Rec("b", "j1", "10.1.0.1"), "ns/c": Rec("c", "j2")})
    assert rec.calls == [
        ("add", "ns/a", Rec("a", "j1")),
        ("add", "ns/b", Rec("b", "j1")),
        ("add", "ns/c", Rec("c", "j2")),
        ("update", "ns/b", Rec("b", "j1"), Rec("b", "j1", "10.1.0.1")),
        ("delete", "ns/a", Rec("a", "j1")),
    ]
    assert [r.name for r in mirror.store.by_index("job", "j1")] == ["b"]


# -- watch events --------------------------------------------------------------


def test_mirror_apply_events() -> None:
    rec = Recorder()
    mirror = new_mirror(rec)
    mirror.apply("ADDED", raw("a"))
    mirror.apply("MODIFIED", raw("a", noise="heartbeat"))  # slim record unchanged
    mirror.apply("MODIFIED", raw("a", ip="10.1.0.5"))
    mirror.apply("ADDED", raw("a", ip="10.1.0.6"))  # ADDED for a known key is an update
    mirror.apply("DELETED", raw("a", ip="10.1.0.7"))
    mirror.apply("DELETED", raw("never-seen"))
    assert rec.calls == [
        ("add", "ns/a", Rec("a", "j1")),
        ("update", "ns/a", Rec("a", "j1"), Rec("a", "j1", "10.1.0.5")),
        ("update", "ns/a", Rec("a", "j1", "10.1.0.5"), Rec("a", "j1", "10.1.0.6")),
        ("delete", "ns/a", Rec("a", "j1", "10.1.0.6")),  # the last stored record
    ]
    assert len(mirror.store) == 0


def test_transform_none_drops_a_stored_object() -> None:
    rec = Recorder()
    mirror = new_mirror(rec)
    mirror.apply("ADDED", raw("a"))
    unlabelled = raw("a")
    del unlabelled["metadata"]["labels"]
    mirror.apply("MODIFIED", unlabelled)
    mirror.apply("MODIFIED", unlabelled)  # still uninteresting: nothing to report
    assert rec.calls == [("add", "ns/a", Rec("a", "j1")), ("delete", "ns/a", Rec("a", "j1"))]


def test_handler_and_transform_errors_do_not_stop_the_mirror() -> None:
    seen: list[str] = []

    def flaky_add(key: str, new: Rec) -> None:
        seen.append(key)
        if key == "ns/a":
            raise RuntimeError("handler bug")

    def flaky_transform(obj: Json) -> Rec | None:
        if obj["metadata"]["name"] == "bad":
            raise KeyError("spec")
        return to_rec(obj)

    mirror: Mirror[Rec] = Mirror(transform=flaky_transform, on_add=flaky_add)
    mirror.apply("ADDED", raw("a"))
    mirror.apply("ADDED", raw("bad"))
    mirror.apply("ADDED", raw("b"))
    assert seen == ["ns/a", "ns/b"]
    assert mirror.store.keys() == ["ns/a", "ns/b"]


def offline_reflector(**kwargs: Any) -> Reflector[Rec]:
    # No request is made by the code under test; the ApiClient is never used.
    return Reflector(cast(ApiClient, None), PODS, transform=to_rec, registry=CollectorRegistry(), **kwargs)


def test_handle_bookmark_and_events_advance_resource_version() -> None:
    reflector = offline_reflector()
    rv = reflector._handle({"type": "ADDED", "object": raw("a", rv="11")}, "10")
    assert rv == "11" and reflector.store.keys() == ["ns/a"]
    rv = reflector._handle({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "42"}}}, rv)
    assert rv == "42" and reflector.resource_version == "42"
    assert reflector.store.keys() == ["ns/a"]  # a bookmark carries no object


def test_handle_error_event_raises_status() -> None:
    reflector = offline_reflector()
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
    with pytest.raises(Gone, match="^410 Expired: too old$"):
        reflector._handle(gone, "10")
    other = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError", "message": "x"}}
    with pytest.raises(ApiError, match="^500 InternalError: x$") as info:
        reflector._handle(other, "10")
    assert type(info.value) is ApiError and info.value.status == 500


# -- backoff -------------------------------------------------------------------


def test_backoff_schedule_doubles_caps_and_resets() -> None:
    now = [0.0]
    backoff = Backoff(clock=lambda: now[0], rand=lambda: 0.0)
    delays = []
    for _ in range(8):
        delays.append(backoff.next_delay())
        now[0] += 1.0
    assert delays == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])
    now[0] += 121.0  # a quiet period
    assert backoff.next_delay() == pytest.approx(0.8)


def test_backoff_jitter_adds_up_to_the_delay() -> None:
    backoff = Backoff(clock=lambda: 0.0, rand=lambda: 0.999)
    assert backoff.next_delay() == pytest.approx(0.8 * 1.999)
    assert backoff.next_delay() == pytest.approx(1.6 * 1.999)


# -- the run loop's policy -------------------------------------------------------


class Stop(BaseException):
    """Ends the scripted run (not an Exception, so the loop does not retry it)."""


class ScriptedReflector(Reflector[Rec]):
    """The real run loop and list_once, with list/watch outcomes from a script."""

    def __init__(self, lists: list[dict[str, Rec]], watches: list[Any], **kwargs: Any) -> None:
        super().__init__(
            cast(ApiClient, None),
            PODS,
            transform=to_rec,
            backoff=Backoff(initial=0.0, clock=lambda: 0.0),
            **kwargs,
        )
        self._lists_script: Iterator[dict[str, Rec]] = iter(lists)
        self._watch_script: Iterator[Any] = iter(watches)
        self.log: list[str] = []

    async def _list(self) -> tuple[dict[str, Rec], str, int]:
        records = next(self._lists_script)
        rv = f"list{len([e for e in self.log if e.startswith('list')])}"
        self.log.append(rv)
        return records, rv, 1

    async def watch_once(self, resource_version: str) -> str:
        outcome = next(self._watch_script)
        self.log.append(f"watch@{resource_version}")
        if isinstance(outcome, BaseException):
            raise outcome
        return str(outcome)


async def test_run_loop_resumes_relists_and_backs_off() -> None:
    registry = CollectorRegistry()
    rec = Recorder()
    reflector = ScriptedReflector(
        lists=[{"ns/a": Rec("a", "j1"), "ns/b": Rec("b", "j1")}, {"ns/b": Rec("b", "j1")}],
        watches=[
            "rv5",  # server closed the stream: resume from rv5
            ConnectionResetError("reset"),  # error: back off, resume from rv5 again
            Gone(410, "Expired", "too old resource version"),  # relist
            TimeoutError(),  # stalled stream: back off, resume from the relist's version
            Stop("the script's last watch"),
        ],
        registry=registry,
        on_add=rec.on_add,
        on_delete=rec.on_delete,
    )
    rec.store = reflector.store
    with pytest.raises(Stop, match="^the script's last watch$"):
        await asyncio.wait_for(reflector.run(), 5)

    assert reflector.log == [
        "list0",
        "watch@list0",
        "watch@rv5",
        "watch@rv5",
        "list1",
        "watch@list1",
        "watch@list1",
    ]
    assert reflector.has_synced.is_set()
    # The relist reported the object that vanished while we were not watching.
    assert ("delete", "ns/a", Rec("a", "j1")) in rec.calls
    assert reflector.store.keys() == ["ns/b"]

    def count(name: str) -> float | None:
        return registry.get_sample_value(name, {"resource": "pods"})

    assert count("ringcontroller_relists_total") == 1
    # Re-opened watches: after the close, after the reset, after the timeout.
    assert count("ringcontroller_watch_restarts_total") == 3


async def test_run_loop_retries_a_failed_list() -> None:
    reflector = ScriptedReflector(lists=[], watches=[Stop("the first watch")], registry=CollectorRegistry())
    attempts = 0

    async def failing_then_ok() -> tuple[dict[str, Rec], str, int]:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise ApiError(503, "ServiceUnavailable", "starting")
        return {}, "7", 1

    reflector._list = failing_then_ok  # type: ignore[method-assign]
    with pytest.raises(Stop, match="^the first watch$"):
        await asyncio.wait_for(reflector.run(), 5)
    assert attempts == 3
    assert reflector.log == ["watch@7"]
    assert reflector.has_synced.is_set()


async def test_run_is_cancellable() -> None:
    reflector = ScriptedReflector(lists=[{}], watches=[], registry=CollectorRegistry())

    async def hang(resource_version: str) -> str:
        await asyncio.Event().wait()
        return resource_version

    reflector.watch_once = hang  # type: ignore[method-assign]
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(reflector.has_synced.wait(), 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):  # noqa: PT011 - a cancellation has no message
        await task


async def test_failed_watch_resumes_from_last_version_it_saw() -> None:
    reflector = ScriptedReflector(lists=[{}], watches=[], registry=CollectorRegistry())
    seen: list[str] = []

    async def watch(resource_version: str) -> str:
        seen.append(resource_version)
        if len(seen) == 1:
            # Two events arrived, then the connection broke.
            reflector._handle({"type": "ADDED", "object": raw("a", rv="8")}, resource_version)
            reflector._handle({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}, "8")
            raise ConnectionResetError("reset")
        raise Stop("the second watch")

    reflector.watch_once = watch  # type: ignore[method-assign]
    with pytest.raises(Stop, match="^the second watch$"):
        await asyncio.wait_for(reflector.run(), 5)
    assert seen == ["list0", "9"]
