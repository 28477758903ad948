"""Big jobs are decided off the event loop (``agent.worker.Offload``), with the same result as on it."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from agent.worker import JobWorker, Offload, snapshot_order
from model.configmap import configmap_record
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.topology import HOSTNAME_KEY, RankOrder
from model.volcano import workload_record
from ringcontroller import memory
from tests.support.factories import volcano_job, volcano_pod
from tests.support.memoryapi import MemoryAPI

LABEL = "ring-controller.atlas"
RACK = "example.com/rack"
KEYS = (RACK, HOSTNAME_KEY)


def _job(n: int) -> tuple[dict[str, Any], WorkloadRecord]:
    raw = volcano_job("j", namespace="ns", tasks=[("worker", n)], uid="job-uid")
    return raw, workload_record(raw, label_key=LABEL)


def _pods(raw: dict[str, Any], n: int) -> list[PodRecord]:
    return [
        pod_record(
            volcano_pod(
                raw,
                task="worker",
                index=i,
                uid=f"uid-{i}",
                ip=f"127.{1 + i // 65536}.{(i // 256) % 256}.{i % 256}",
                phase="Running",
                node=f"n{i % 16}",
            )
        )
        for i in range(n)
    ]


async def _ticks_during(worker: JobWorker, wl: WorkloadRecord, pods: list[PodRecord]) -> int:
    """How many times another task ran on the loop while ``worker`` synced the job."""
    ticks = 0
    running = True

    async def tick() -> None:
        nonlocal ticks
        while running:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(tick())
    await asyncio.sleep(0)
    before = ticks
    decision = await worker.sync(wl, pods, None)
    during = ticks - before
    running = False
    await task
    assert decision.spec.status == "completed"
    return during


async def test_a_big_job_is_decided_while_the_loop_keeps_running_and_a_small_one_on_the_loop() -> None:
    raw, wl = _job(3000)
    pods = _pods(raw, 3000)
    held = await _ticks_during(JobWorker(api=MemoryAPI(), touch_pods=False), wl, pods)
    offload = Offload(min_pods=1000)
    try:
        free = await _ticks_during(JobWorker(api=MemoryAPI(), touch_pods=False, offload=offload), wl, pods)
    finally:
        offload.close()
    # On the loop the decision (tens of milliseconds of CPU) runs between two ticks at most;
    # off it, the loop turns over every time the thread yields the GIL.
    assert held <= 3
    assert free > held + 10


async def test_the_decision_off_the_loop_writes_what_the_loop_would_and_runs_on_its_thread() -> None:
    raw, wl = _job(40)
    pods = _pods(raw, 40)
    racks = {f"n{i}": (f"r{i % 2}", f"n{i}") for i in range(16)}
    order = RankOrder(rule="topology", keys=KEYS, node_path=racks.get)
    inline_api, off_api = MemoryAPI(), MemoryAPI()
    offload = Offload(min_pods=10)
    threads: list[str] = []
    try:
        await JobWorker(api=inline_api, touch_pods=False).sync(wl, pods, None, order=order)
        await JobWorker(api=off_api, touch_pods=False, offload=offload).sync(wl, pods, None, order=order)
        threads.append(await offload.run(lambda: threading.current_thread().name))
        # A new leader's first sync parses the spec it finds; a big one on the thread too.
        cm = configmap_record(off_api.cms[("ns", "rings-config-j")])
        parsing = Offload(min_pods=10, min_stored=1)
        fresh = JobWorker(api=off_api, touch_pods=False, offload=parsing)
        again = await fresh.sync(wl, pods, cm, order=order)
        parsing.close()
    finally:
        offload.close()
    inline = json.loads(inline_api.cms[("ns", "rings-config-j")]["data"]["cluster.json"])
    off = json.loads(off_api.cms[("ns", "rings-config-j")]["data"]["cluster.json"])
    assert off == inline and off["rankOrder"] == "topology"
    # Topology order held: rack r0's members (even nodes) first, then r1's.
    assert [int(m["node"][1:]) % 2 for m in off["members"]] == [0] * 20 + [1] * 20
    assert again.spec.epoch == 1 and off_api.calls == ["create"]  # found as written: no second write
    assert threads == ["ring-decide_0"]


def test_the_order_a_thread_reads_is_resolved_on_the_loop_for_the_pods_nodes() -> None:
    raw, _ = _job(4)
    pods = _pods(raw, 4)
    looked: list[str] = []

    def path(name: str) -> tuple[str, ...] | None:
        looked.append(name)
        return ("r0", name) if name != "n3" else None

    order = RankOrder(rule="topology", keys=KEYS, node_path=path, hypernodes=lambda n: {1: f"h-{n}"})
    snap = snapshot_order(order, pods)
    assert snap is not None and sorted(looked) == ["n0", "n1", "n2", "n3"]
    looked.clear()
    assert snap.node_path("n1") == ("r0", "n1") and snap.node_path("n3") is None and snap.node_path("n9") is None
    assert snap.hypernodes("n2") == {1: "h-n2"} and snap.hypernodes("n9") == {}
    assert looked == []  # the thread's lookups never reach the live caches
    assert snap.rule == "topology" and snap.keys == KEYS
    assert snapshot_order(None, pods) is None


def test_what_goes_to_the_thread() -> None:
    offload = Offload(min_pods=1000, min_stored=100_000)
    assert not offload.wants(pods=999, expected=999, stored=99_999)
    assert offload.wants(pods=1000)
    assert offload.wants(expected=1000)
    assert offload.wants(stored=100_000)


async def test_memory_is_released_on_the_thread_after_each_call_even_a_failing_one() -> None:
    released: list[str] = []
    offload = Offload(release=lambda: released.append(threading.current_thread().name))
    try:
        assert await offload.run(lambda: 7) == 7
        with pytest.raises(ZeroDivisionError, match="division"):
            await offload.run(lambda: 1 // 0)
    finally:
        offload.close()
    assert released == ["ring-decide_0", "ring-decide_0"]


def test_the_daemons_release_returns_and_is_safe_to_call_again() -> None:
    memory.release()
    memory.release()
