"""``python -m tests.bench.offload [--members 20000] [--json OUT]``: how long a big job's sync holds the event loop.

One process, plain data: a Volcano Job of ``--members`` Running members,
synced by a :class:`agent.worker.JobWorker` against the in-memory ConfigMap
store, first with the decision on the event loop, then on
:class:`agent.worker.Offload`'s thread. Two syncs each: the first (decide,
render, validate, compress, write) and a new leader's first (a fresh worker
finding the ConfigMap in its cache: parse the stored spec, decide, nothing
to write). A timer task beside them wakes every 50 ms; its lateness is how
long the loop was held. Wall and CPU time of the two syncs, the longest and
the median lateness, the process's peak RSS. Progress to stderr, the JSON
to stdout (or ``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agent.worker import JobWorker, Offload
from model.configmap import configmap_record
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.volcano import workload_record
from tests.support.factories import volcano_job, volcano_pod
from tests.support.memoryapi import MemoryAPI

TICK_S = 0.05


def _job(members: int) -> tuple[WorkloadRecord, list[PodRecord]]:
    raw = volcano_job("j", tasks=[("worker", members)], uid="job-uid")
    pods = [
        pod_record(
            volcano_pod(
                raw,
                task="worker",
                index=i,
                uid=f"{i:08x}-0d2c-4c36-9f0e-{i * 2654435761 % 2**48:012x}",  # 36 characters, as real uids
                ip=f"127.{1 + i // 65536}.{(i // 256) % 256}.{i % 256}",
                host_ip="10.0.0.1",
                phase="Running",
                node=f"n{i // 100}",
            )
        )
        for i in range(members)
    ]
    return workload_record(raw, label_key="ring-controller.atlas"), pods


async def _run(wl: WorkloadRecord, pods: list[PodRecord], offload: Offload | None) -> dict[str, Any]:
    api = MemoryAPI()
    lags: list[float] = []
    running = True

    async def tick() -> None:
        while running:
            due = time.monotonic() + TICK_S
            await asyncio.sleep(TICK_S)
            lags.append(max(0.0, time.monotonic() - due))

    timer = asyncio.create_task(tick())
    await asyncio.sleep(2 * TICK_S)
    cpu, wall = time.process_time(), time.monotonic()
    first = await JobWorker(api=api, offload=offload, touch_pods=False).sync(wl, pods, None)
    first_s = time.monotonic() - wall
    cm = configmap_record(next(iter(api.cms.values())))
    again_at = time.monotonic()
    again = await JobWorker(api=api, offload=offload, touch_pods=False).sync(wl, pods, cm)
    again_s = time.monotonic() - again_at
    cpu_s = time.process_time() - cpu
    await asyncio.sleep(2 * TICK_S)
    running = False
    await timer
    assert first.spec.status == again.spec.status == "completed" and api.calls == ["create"]
    return {
        "where": "thread" if offload is not None else "loop",
        "first_sync_s": round(first_s, 3),
        "new_leader_sync_s": round(again_s, 3),
        "cpu_s": round(cpu_s, 3),
        "loop_held_max_s": round(max(lags), 3),
        "loop_held_median_s": round(statistics.median(lags), 4),
        "timer_samples": len(lags),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure (see the module doc); 0 on success."""
    p = argparse.ArgumentParser(prog="python -m tests.bench.offload", description=__doc__.split("\n")[0])
    p.add_argument("--members", type=int, default=20_000)
    p.add_argument("--json", type=Path, metavar="OUT")
    args = p.parse_args(argv)
    wl, pods = _job(args.members)
    rows = []
    for offload in (None, Offload()):
        rows.append(asyncio.run(_run(wl, pods, offload)))
        print(f"offload: {rows[-1]}", file=sys.stderr)
        if offload is not None:
            offload.close()
    doc = {
        "command": " ".join(["python -m tests.bench.offload", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "members": args.members,
        "rows": rows,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    text = json.dumps(doc, indent=2) + "\n"
    if args.json:
        args.json.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
