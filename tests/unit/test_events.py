"""The Events flood guard: duplicates and per-object bursts are dropped, memory stays bounded.

The last tests drive it the way production does: a job's worker behind the
agent's ``BackgroundEvents``, a pod whose device annotation flaps between
valid and invalid a thousand times, and count the Events that reach the API.
"""

from __future__ import annotations

import json
from typing import Any

from agent.agent import BackgroundEvents
from agent.events import BURST, DEDUPE_SECONDS, REFILL_SECONDS, EventCorrelator
from agent.worker import JobWorker
from model.pod import pod_record
from model.records import PodRecord
from model.volcano import workload_record
from tests.support.factories import device_annotation, pod_template, volcano_job, volcano_pod
from tests.support.memoryapi import MemoryAPI
from tests.support.metricvalue import value

POD = {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "u1"}
OTHER = {"kind": "Pod", "namespace": "ns", "name": "q", "uid": "u2"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def allow(c: EventCorrelator, message: str = "m", involved: dict[str, Any] = POD, reason: str = "R") -> str:
    return c.allow(involved=involved, event_type="Warning", reason=reason, message=message)


def test_an_identical_event_is_sent_once_per_dedupe_window() -> None:
    clock = Clock()
    c = EventCorrelator(clock=clock)
    assert allow(c) == "send"
    assert [allow(c) for _ in range(100)] == ["duplicate"] * 100
    clock.now += DEDUPE_SECONDS - 1
    assert allow(c) == "duplicate"
    clock.now += 1
    assert allow(c) == "send"


def test_events_that_differ_are_not_duplicates() -> None:
    c = EventCorrelator(clock=Clock())
    assert [allow(c, reason="A"), allow(c, reason="B"), allow(c, message="other"), allow(c, involved=OTHER)] == [
        "send"
    ] * 4


def test_each_object_has_a_burst_then_one_event_per_refill_period() -> None:
    clock = Clock()
    c = EventCorrelator(clock=clock)
    assert [allow(c, message=f"m{i}") for i in range(BURST)] == ["send"] * BURST
    assert allow(c, message="over") == "rate_limited"
    assert allow(c, message="m-other-object", involved=OTHER) == "send"  # buckets are per object
    clock.now += REFILL_SECONDS / 2
    assert allow(c, message="half") == "rate_limited"
    clock.now += REFILL_SECONDS / 2
    assert allow(c, message="refilled") == "send"
    assert allow(c, message="again") == "rate_limited"


def test_state_is_bounded_by_max_keys() -> None:
    c = EventCorrelator(clock=Clock(), max_keys=10, burst=10**6)
    for i in range(1000):
        allow(c, message=f"m{i}", involved={**POD, "uid": f"u{i % 50}"})
    assert c.tracked <= 20


# Through the real path: worker -> BackgroundEvents -> API ------------------------------------


LABEL = "ring-controller.atlas"


def _npu_job() -> tuple[dict[str, Any], Any]:
    raw = volcano_job("npu", namespace="ns", tasks=[("worker", 1)], template=pod_template(npus=1), uid="npu-uid")
    return raw, workload_record(raw, label_key=LABEL)


def _pod(raw: dict[str, Any], devices: str) -> list[PodRecord]:
    return [
        pod_record(volcano_pod(raw, task="worker", index=0, uid="p0", ip="127.1.0.1", phase="Running", devices=devices))
    ]


GOOD = device_annotation("10.0.0.1", [("0", "192.168.100.1")])


async def flap(bad: list[str], rounds: int) -> tuple[MemoryAPI, float]:
    api = MemoryAPI()
    events = BackgroundEvents(api)
    raw, wl = _npu_job()
    worker = JobWorker(api=events)
    for i in range(rounds):
        await worker.sync(wl, _pod(raw, json.dumps(GOOD)), api.record("ns", wl.configmap))
        await worker.sync(wl, _pod(raw, bad[i % len(bad)]), api.record("ns", wl.configmap))
    await events.drain()
    dropped = events.metrics.events_dropped  # the events' own registry: starts at 0
    return api, value(dropped, cause="duplicate") + value(dropped, cause="rate_limited")


async def test_a_flapping_annotation_sends_each_distinct_event_once() -> None:
    api, dropped = await flap(["{not json"], rounds=200)
    warnings = [e for e in api.events if e[0] == "Warning"]
    assert warnings == [("Warning", "InvalidDeviceAnnotation")]
    # Each valid spell completes the spec at a new epoch: distinct messages, bounded by the burst.
    assert len(api.events) <= BURST + 1
    assert dropped >= 2 * 200 - len(api.events)


async def test_a_flood_of_distinct_bad_values_is_bounded_by_the_burst() -> None:
    api, _ = await flap([f'{{"devices": [{{"device_id": "x{i}"}}]}}' for i in range(200)], rounds=200)
    assert len(api.events) <= BURST  # one bucket: the workload object
