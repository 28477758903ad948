"""Cluster specs built from plain data, for the ranktable and launcher tests."""

from __future__ import annotations

import json
from typing import Any

from ranktable.clusterspec import (
    STATUS_COMPLETED,
    ClusterSpec,
    Device,
    JobRef,
    Member,
    role_for_task,
    spec_to_json,
)

JOB = JobRef(
    kind="Job", api_version="batch.volcano.sh/v1alpha1", namespace="default", name="job", uid="job-uid", version=0
)


def make_member(rank: int, task: str, index: int, *, devices: int = 0, job: str = "job") -> Member:
    """Member ``rank`` of task ``task``: IP 127.1.0.<rank+1>, port 2222+rank, ``devices`` NPUs."""
    pod = f"{job}-{task}-{index}"
    return Member(
        rank=rank,
        task=task,
        role=role_for_task(task),
        index=index,
        pod=pod,
        uid=f"uid-{pod}",
        ip=f"127.1.0.{rank + 1}",
        port=2222 + rank,
        node="node-0",
        host=f"192.168.0.{10 + rank}" if devices else "",
        devices=tuple(Device(device_id=str(d), device_ip=f"192.168.{100 + d}.{rank + 1}") for d in range(devices)),
    )


def make_spec(
    tasks: list[tuple[str, int]],
    *,
    status: str = STATUS_COMPLETED,
    epoch: int = 1,
    devices: int = 0,
    present: set[int] | None = None,
) -> ClusterSpec:
    """A spec of ``tasks`` ([(name, replicas)], ranks in task order then index).

    ``present`` keeps only those ranks (for initializing specs).
    """
    members = []
    rank = 0
    for task, replicas in tasks:
        for index in range(replicas):
            if present is None or rank in present:
                members.append(make_member(rank, task, index, devices=devices))
            rank += 1
    return ClusterSpec(status=status, job=JOB, epoch=epoch, expected=rank, members=tuple(members))


def spec_dict(**changes: Any) -> dict[str, Any]:
    """The JSON object of a valid 2-worker completed spec, with top-level ``changes``."""
    obj: dict[str, Any] = json.loads(spec_to_json(make_spec([("worker", 2)])))
    obj.update(changes)
    return obj


def big_spec(members: int, *, devices: int = 0, epoch: int = 1) -> ClusterSpec:
    """A completed spec of ``members`` workers, addresses as long as a real cluster's, ``devices`` NPUs each, 8 pods a node."""
    return ClusterSpec(
        status=STATUS_COMPLETED,
        job=JOB,
        epoch=epoch,
        expected=members,
        members=tuple(
            Member(
                rank=r,
                task="worker",
                role="worker",
                index=r,
                pod=f"job-worker-{r}",
                uid=f"uid-{r}",
                ip=f"10.{244 + r // 64_000}.{r // 250 % 256}.{r % 250 + 1}",
                port=2222,
                node=f"node-{r // 8}",
                host=f"172.16.{r // 8 // 250}.{r // 8 % 250 + 1}" if devices else "",
                devices=tuple(
                    Device(device_id=str(r % 8 + d), device_ip=f"10.{100 + d}.{r // 250 % 256}.{r % 250 + 1}")
                    for d in range(devices)
                ),
            )
            for r in range(members)
        ),
    )
