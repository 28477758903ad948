"""The performance changes the benchmark led to keep the behaviour they replaced.

- :func:`agent.decide.decide` memoises parsed device annotations: a bad
  annotation must still be reported on every decision, a good one must give
  the same spec as a fresh parse, and an initializing spec must not depend on
  whether members were built.
- :class:`agent.agent.BackgroundEvents` sends Events without holding up the
  sync: ``emit_event`` returns before the send finishes, a failed send is
  swallowed, and beyond the in-flight limit the caller waits.

(Candidates for ``tests/unit``; kept next to the benchmark that motivated them.)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent import decide as decide_module
from agent.agent import BackgroundEvents
from agent.decide import decide
from model.pod import pod_record
from model.records import PodRecord
from model.volcano import workload_record
from tests.support.factories import device_annotation, pod_template, volcano_job, volcano_pod

LABEL = "ring-controller.atlas"


def _npu_job(n: int, annotations: list[str | None]) -> tuple[Any, list[PodRecord]]:
    raw = volcano_job("npu", tasks=[("worker", n)], uid="job-uid", template=pod_template(runtime="ascend-910", npus=1))
    pods = [
        pod_record(
            volcano_pod(raw, task="worker", index=i, uid=f"p{i}", ip=f"127.1.0.{i + 1}", phase="Running", devices=a)
        )
        for i, a in enumerate(annotations)
    ]
    return workload_record(raw, label_key=LABEL), pods


def test_bad_annotation_is_reported_on_every_decision() -> None:
    decide_module._PARSED.clear()
    wl, pods = _npu_job(2, ["{broken", json.dumps(device_annotation("10.0.0.1", [("0", "10.1.0.1")]))])
    first = decide(wl, pods, previous=None)
    second = decide(wl, pods, previous=None)
    assert [p.reason for p in first.problems] == ["device_json"]
    assert first.problems == second.problems
    assert first.spec.status == second.spec.status == "initializing"
    assert first.ready == 1


def test_memoised_annotation_gives_the_same_spec_as_a_fresh_parse() -> None:
    annotations = [
        json.dumps(device_annotation(f"10.0.0.{i}", [("0", f"10.1.0.{i}"), ("1", f"10.2.0.{i}")])) for i in range(3)
    ]
    wl, pods = _npu_job(3, list(annotations))
    decide_module._PARSED.clear()
    fresh = decide(wl, pods, previous=None)
    cached = decide(wl, pods, previous=None)
    assert fresh.data == cached.data and fresh.spec.status == "completed"
    assert [m.host for m in cached.spec.members] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    assert [len(m.devices) for m in cached.spec.members] == [2, 2, 2]


def test_the_memo_is_bounded() -> None:
    decide_module._PARSED.clear()
    old_max = decide_module._PARSED_MAX
    decide_module._PARSED_MAX = 2
    try:
        texts = [json.dumps(device_annotation("10.0.0.1", [("0", f"10.1.0.{i}")])) for i in range(5)]
        for text in texts:
            decide_module._parse_devices(text)
        assert len(decide_module._PARSED) <= 2
    finally:
        decide_module._PARSED_MAX = old_max
        decide_module._PARSED.clear()


class _SlowApi:
    def __init__(self, *, fail: bool = False) -> None:
        self.release = asyncio.Event()
        self.sent: list[str] = []
        self.fail = fail

    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}}

    async def create_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return body

    async def replace_configmap(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return body

    async def annotate_pod(self, namespace: str, name: str, *, uid: str, annotations: dict[str, str]) -> None:
        return None

    async def emit_event(self, *, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        await self.release.wait()
        if self.fail:
            raise RuntimeError("API down")
        self.sent.append(reason)


def test_events_are_sent_in_the_background() -> None:
    async def run() -> None:
        api = _SlowApi()
        events = BackgroundEvents(api, limit=8)
        await asyncio.wait_for(
            events.emit_event(involved={}, event_type="Normal", reason="SpecCompleted", message="m"), 1
        )
        assert api.sent == []  # returned before the send finished
        assert (await events.get_configmap("ns", "cm")) == {"metadata": {"name": "cm"}}
        api.release.set()
        await events.drain()
        assert api.sent == ["SpecCompleted"]

    asyncio.run(run())


def test_failed_background_event_is_swallowed() -> None:
    async def run() -> None:
        api = _SlowApi(fail=True)
        api.release.set()
        events = BackgroundEvents(api)
        await events.emit_event(involved={}, event_type="Warning", reason="SpecTooLarge", message="m")
        await events.drain()
        assert api.sent == []

    asyncio.run(run())


def test_beyond_the_limit_the_caller_waits_for_its_send() -> None:
    async def run() -> None:
        api = _SlowApi()
        events = BackgroundEvents(api, limit=1)
        await events.emit_event(involved={}, event_type="Normal", reason="first", message="m")
        blocked = asyncio.create_task(events.emit_event(involved={}, event_type="Normal", reason="second", message="m"))
        await asyncio.sleep(0.05)
        assert not blocked.done()  # waits: one send already in flight
        api.release.set()
        await asyncio.wait_for(blocked, 1)
        await events.drain()
        assert sorted(api.sent) == ["first", "second"]

    asyncio.run(run())
