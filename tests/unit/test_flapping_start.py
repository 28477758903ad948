"""A big job's start with flapping pods, through the real work queue and the agent: the queue
stays bounded by the jobs, and each epoch is written once."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

from prometheus_client import CollectorRegistry

from agent.agent import Agent
from agent.worker import Offload
from model.pod import pod_record
from model.records import JobKey, ObjectKey, PodRecord
from model.volcano import workload_record
from ringcontroller.workqueue import WorkQueue
from tests.support.factories import volcano_job, volcano_pod
from tests.support.memoryapi import MemoryAPI

LABEL = "ring-controller.atlas"
MEMBERS = 2_000


async def test_flapping_pods_during_a_big_start_keep_the_queue_at_one_key_and_write_each_epoch_once() -> None:
    raw = volcano_job("j", namespace="ns", tasks=[("worker", MEMBERS)], uid="job-uid")
    wl = workload_record(raw, label_key=LABEL)
    (key,) = wl.job_keys
    running = [
        pod_record(
            volcano_pod(
                raw, task="worker", index=i, uid=f"uid-{i}", ip=f"127.1.{i // 250}.{i % 250 + 1}", phase="Running"
            )
        )
        for i in range(MEMBERS)
    ]
    pods: dict[str, PodRecord] = {}
    api = MemoryAPI()
    queue: WorkQueue[JobKey] = WorkQueue("flapping", registry=CollectorRegistry())
    offload = Offload(min_pods=500)

    def configmap(k: ObjectKey) -> object:
        namespace, _, name = k.partition("/")
        return api.record(namespace, name)

    agent = Agent(
        api=api,
        enqueue=queue.add,
        workload=lambda k: wl if k == key else None,
        pods=lambda k: [pods[u] for u in sorted(pods)] if k == key else [],
        configmap=configmap,  # type: ignore[arg-type]  # MemoryAPI's records are ConfigMapRecords
        offload=offload,
    )
    depths: list[int] = []
    synced = 0

    async def work() -> None:
        nonlocal synced
        while True:
            k = await queue.get()
            try:
                await agent.sync(k)
                synced += 1
            finally:
                queue.done(k)

    worker = asyncio.create_task(work())
    rng = random.Random(7)
    order = list(range(MEMBERS))
    rng.shuffle(order)
    try:
        for n, i in enumerate(order):
            old = pods.get(running[i].uid)
            pods[running[i].uid] = running[i]
            agent.on_pod(old, running[i])
            if n < MEMBERS - 1 and n % 3 == 0:  # a pod that was up goes down and comes back before the last one
                j = order[rng.randrange(n + 1)]
                down = replace(running[j], phase="Pending", ip="")
                agent.on_pod(pods[running[j].uid], down)
                pods[running[j].uid] = down
                depths.append(len(queue))
                agent.on_pod(down, running[j])
                pods[running[j].uid] = running[j]
            depths.append(len(queue))
            if n % 50 == 0:
                await asyncio.sleep(0)  # the worker takes a key now and then, as events arrive in bursts
        while len(queue) or agent.status(key) != "completed":
            await asyncio.sleep(0.01)
    finally:
        worker.cancel()
        offload.close()
    assert max(depths) == 1  # one job: one key, however many of its pods changed
    assert synced < MEMBERS  # events collapse while the key waits or is being synced
    writes = [c for c in api.calls if c in ("create", "update")]
    assert writes == ["create", "update"]  # epoch 0 initializing once, epoch 1 completed once
    assert agent.status(key) == "completed"
