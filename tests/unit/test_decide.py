"""The agent's decision on plain records: ranks, counting, epochs, problems."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agent.decide import decide
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.volcano import workload_record
from ranktable.clusterspec import spec_from_json
from tests.support.factories import device_annotation, pod_template, volcano_job, volcano_pod

LABEL = "ring-controller.atlas"


def _job(tasks: list[tuple[str, int]], **kw: Any) -> tuple[dict[str, Any], WorkloadRecord]:
    raw = volcano_job("j", tasks=tasks, uid="job-uid", **kw)
    return raw, workload_record(raw, label_key=LABEL)


def _pods(
    raw: dict[str, Any], *, version: int = 0, skip: set[tuple[str, int]] = frozenset(), ip_base: int = 10, **kw: Any
) -> list[PodRecord]:
    out = []
    n = 0
    for task in raw["spec"]["tasks"]:
        for i in range(task["replicas"]):
            n += 1
            if (task["name"], i) in skip:
                continue
            out.append(
                pod_record(
                    volcano_pod(
                        raw,
                        task=task["name"],
                        index=i,
                        version=version,
                        uid=f"pod-{task['name']}-{i}",
                        ip=f"127.1.0.{ip_base + n}",
                        host_ip="10.0.0.1",
                        phase="Running",
                        node="n1",
                        **kw,
                    )
                )
            )
    return out


def test_complete_job_ranks_follow_spec_not_arrival() -> None:
    raw, wl = _job([("chief", 1), ("worker", 3)])
    pods = list(reversed(_pods(raw)))  # arrival order reversed
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "completed"
    assert [(m.rank, m.task, m.index) for m in d.spec.members] == [
        (0, "chief", 0),
        (1, "worker", 0),
        (2, "worker", 1),
        (3, "worker", 2),
    ]
    assert [m.role for m in d.spec.members] == ["chief", "worker", "worker", "worker"]
    assert d.data is not None and "hccl.json" not in d.data
    assert spec_from_json(d.data["cluster.json"]) == d.spec
    assert d.spec.epoch == 1


def test_incomplete_job_lists_no_members_and_keeps_epoch() -> None:
    raw, wl = _job([("worker", 3)])
    d0 = decide(wl, [], previous=None)
    assert (d0.spec.status, d0.spec.epoch, d0.spec.members) == ("initializing", 0, ())
    # Two of three ready: still initializing, and byte-identical (no write needed).
    d1 = decide(wl, _pods(raw, skip={("worker", 2)}), previous=d0.spec)
    assert d1.spec.status == "initializing" and d1.ready == 2
    assert d1.data == d0.data


def test_pending_pod_does_not_count() -> None:
    raw, wl = _job([("worker", 2)])
    pods = _pods(raw)
    pending = pod_record(volcano_pod(raw, task="worker", index=1, phase="Pending"))
    d = decide(wl, [pods[0], pending], previous=None)
    assert d.spec.status == "initializing"


def test_replaced_member_bumps_epoch_twice_through_initializing() -> None:
    raw, wl = _job([("worker", 2)])
    done = decide(wl, _pods(raw), previous=None).spec
    gone = decide(wl, _pods(raw, skip={("worker", 1)}), previous=done).spec
    assert gone.status == "initializing" and gone.epoch == done.epoch + 1
    back = decide(wl, _pods(raw, ip_base=50), previous=gone).spec
    assert back.status == "completed" and back.epoch == gone.epoch + 1
    assert back.members[1].ip != done.members[1].ip


def test_same_inputs_same_bytes_and_no_epoch_bump() -> None:
    raw, wl = _job([("chief", 1), ("worker", 2)])
    first = decide(wl, _pods(raw), previous=None)
    again = decide(wl, _pods(raw), previous=first.spec)
    assert again.data == first.data
    assert again.spec.epoch == first.spec.epoch


def test_old_version_pods_never_count() -> None:
    raw, wl = _job([("worker", 2)], version=1)
    assert decide(wl, _pods(raw, version=0), previous=None).spec.status == "initializing"
    assert decide(wl, _pods(raw, version=1), previous=None).spec.status == "completed"


def test_pods_of_a_previous_incarnation_never_count() -> None:
    raw, wl = _job([("worker", 1)])
    (pod,) = _pods(raw)
    stranger = replace(pod, owner_uid="other-uid")
    assert decide(wl, [stranger], previous=None).spec.status == "initializing"
    assert decide(wl, [pod], previous=None).spec.status == "completed"


def test_terminating_predecessor_does_not_shadow_its_replacement() -> None:
    raw, wl = _job([("worker", 1)])
    old = replace(pod_record(volcano_pod(raw, task="worker", index=0, ip="127.1.0.3", phase="Running")), deleting=True)
    new = pod_record(volcano_pod(raw, task="worker", index=0, ip="127.1.0.4", phase="Running"))
    d = decide(wl, [old, new], previous=None)
    assert d.spec.status == "completed" and d.spec.members[0].ip == "127.1.0.4"


def test_npu_job_waits_for_devices_then_writes_hccl_v2() -> None:
    raw, wl = _job([("worker", 2)], template=pod_template(runtime="ascend-910", npus=2))
    assert wl.wants_devices
    no_devices = decide(wl, _pods(raw), previous=None)
    assert no_devices.spec.status == "initializing" and not no_devices.problems
    pods = [
        pod_record(
            volcano_pod(
                raw,
                task="worker",
                index=i,
                ip=f"127.1.0.{i + 1}",
                phase="Running",
                devices=device_annotation(f"10.0.0.{i + 1}", [("0", f"192.168.{i}.1"), ("1", f"192.168.{i}.2")]),
            )
        )
        for i in range(2)
    ]
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "completed" and d.data is not None
    table = json.loads(d.data["hccl.json"])
    rank_ids = [dev["rank_id"] for server in table["server_list"] for dev in server["device"]]
    assert rank_ids == ["0", "1", "2", "3"]
    assert [s["server_id"] for s in table["server_list"]] == ["10.0.0.1", "10.0.0.2"]
    assert d.spec.members[1].host == "10.0.0.2"


def test_npu_job_hccl_v1_by_flag() -> None:
    raw, wl = _job([("worker", 1)], template=pod_template(runtime="ascend-910", npus=1))
    pods = [
        pod_record(
            volcano_pod(
                raw,
                task="worker",
                index=0,
                ip="127.1.0.1",
                phase="Running",
                devices=device_annotation("10.0.0.1", [("0", "192.168.0.1")]),
            )
        )
    ]
    d = decide(wl, pods, previous=None, hccl_version="v1")
    assert d.data is not None and "group_list" in json.loads(d.data["hccl.json"])


@pytest.mark.parametrize(
    "annotation, reason",
    [
        pytest.param("{not json", "device_json", id="not-json"),
        pytest.param(
            json.dumps({"server_id": "10.0.0.1", "devices": [{"device_id": "0", "device_ip": "999.1.1.1"}]}),
            "device_device_ip",
            id="bad-ip",
        ),
        pytest.param(
            json.dumps(
                {
                    "server_id": "10.0.0.1",
                    "devices": [{"device_id": "0", "device_ip": "1.1.1.1"}, {"device_id": "0", "device_ip": "1.1.1.2"}],
                }
            ),
            "device_duplicate",
            id="duplicate-id",
        ),
    ],
)
def test_malformed_device_annotation_never_completes(annotation: str, reason: str) -> None:
    raw, wl = _job([("worker", 1)], template=pod_template(runtime="ascend-910", npus=1))
    pods = [pod_record(volcano_pod(raw, task="worker", index=0, ip="127.1.0.1", phase="Running", devices=annotation))]
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "initializing"
    assert [p.reason for p in d.problems] == [reason]
    assert "invalid device annotation" in d.problems[0].message


def test_bad_port_is_a_problem_not_a_member() -> None:
    raw, wl = _job([("worker", 1)])
    raw_pod = volcano_pod(raw, task="worker", index=0, ip="127.1.0.1", phase="Running")
    raw_pod["metadata"]["annotations"]["ring-controller/port"] = "nope"
    d = decide(wl, [pod_record(raw_pod)], previous=None)
    assert d.spec.status == "initializing"
    assert [p.reason for p in d.problems] == ["invalid_port"]


def test_invalid_workload_writes_nothing() -> None:
    raw, _ = _job([("worker", 1)])
    raw["spec"]["tasks"][0]["replicas"] = "one"
    wl = workload_record(raw, label_key=LABEL)
    d = decide(wl, [], previous=None)
    assert d.data is None and d.problems[0].reason == "invalid_workload"


def test_oversized_spec_is_refused_with_a_problem() -> None:
    raw, wl = _job([("worker", 40)])
    d = decide(wl, _pods(raw), previous=None, size_limit=2000)
    assert d.data is None
    assert [p.reason for p in d.problems] == ["too_large"]


def test_cpu_task_beside_npu_tasks_needs_no_devices_and_stays_out_of_the_table() -> None:
    raw = volcano_job(
        "mix",
        tasks=[("scheduler", 1), ("worker", 2)],
        uid="job-uid",
        templates={"scheduler": pod_template(), "worker": pod_template(npus=1)},
    )
    wl = workload_record(raw, label_key=LABEL)
    pods = [pod_record(volcano_pod(raw, task="scheduler", index=0, ip="127.1.0.1", phase="Running"))]
    pods += [
        pod_record(
            volcano_pod(
                raw,
                task="worker",
                index=i,
                ip=f"127.1.0.{2 + i}",
                phase="Running",
                devices=device_annotation(f"10.0.0.{i + 1}", [("0", f"192.168.{i}.1")]),
            )
        )
        for i in range(2)
    ]
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "completed" and d.data is not None
    table = json.loads(d.data["hccl.json"])
    assert [s["server_id"] for s in table["server_list"]] == ["10.0.0.1", "10.0.0.2"]
    assert [dev["rank_id"] for s in table["server_list"] for dev in s["device"]] == ["0", "1"]
