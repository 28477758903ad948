"""The agent's decision on plain records: ranks, counting, epochs, problems."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from agent.decide import JOB_STATUSES, STATUS_INVALID, _device_problem, blocked, decide
from agent.worker import _event_reason
from model.deployment import workload_record as deployment_record
from model.keys import CONFIGMAP_DATA_LIMIT
from model.pod import pod_record
from model.records import ConfigMapRecord, JobKey, PodRecord, WorkloadRecord
from model.volcano import workload_record
from ranktable.clusterspec import STATUSES, spec_from_json
from ranktable.devices import REASONS
from ranktable.stored import unpack
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
            "device_ip",
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


def test_a_job_over_the_member_limit_is_invalid_with_the_limit_in_the_problem() -> None:
    raw, wl = _job([("worker", 3), ("chief", 1)])
    assert decide(wl, _pods(raw), previous=None, max_members=4).status == "completed"  # at the limit: fits
    d = decide(wl, _pods(raw), previous=None, max_members=3)
    assert d.status == STATUS_INVALID and d.data is None and d.ready == 0
    assert [(p.reason, p.message) for p in d.problems] == [
        (
            "too_many_members",
            "Job j asks for 4 members, over this controller's limit of 3 (--max-members); no spec is written",
        )
    ]
    assert _event_reason("too_many_members") == "TooManyMembers"


def test_the_default_member_limit_admits_20000_members() -> None:
    _, wl = _job([("worker", 20_000)])
    assert not any(p.reason == "too_many_members" for p in decide(wl, [], previous=None).problems)
    _, over = _job([("worker", 40_000)])
    assert [p.reason for p in decide(over, [], previous=None).problems] == ["too_many_members"]


def test_the_max_members_flag_defaults_above_20000_and_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    from ringcontroller.options import parse

    assert parse([]).max_members == 32_768 and parse(["--max-members", "5"]).max_members == 5
    with pytest.raises(SystemExit, match="2"):
        parse(["--max-members", "0"])
    assert "--max-members must be at least 1" in capsys.readouterr().err


def test_a_spec_over_the_limit_is_stored_compressed_and_reads_back_the_same() -> None:
    raw, wl = _job([("worker", 40)])
    plain = decide(wl, _pods(raw), previous=None)
    d = decide(wl, _pods(raw), previous=None, size_limit=2000)
    assert plain.stored is not None and not plain.stored.compressed and plain.stored.data == plain.data
    assert d.stored is not None and d.stored.compressed and not d.problems
    assert d.stored.data == {} and set(d.stored.binary_data) == {"cluster.json.gz"}
    assert d.stored.stored_bytes <= 2000 < d.stored.plain_bytes
    assert d.data == plain.data == unpack(d.stored.data, d.stored.binary_data)


def test_a_spec_over_the_limit_even_compressed_is_refused_with_both_sizes() -> None:
    raw, wl = _job([("worker", 40)])
    d = decide(wl, _pods(raw), previous=None, size_limit=500)
    assert d.data is None and d.stored is None
    assert [p.reason for p in d.problems] == ["too_large"]
    assert re.fullmatch(
        r"spec of 40 members is \d+ bytes plain, \d+ bytes gzip-compressed, over the ConfigMap limit of 500 bytes; "
        r"no spec is written \(what the ConfigMap held stays\)\. About \d+ members of this job fit one ConfigMap: "
        r"split it into jobs of at most that many",
        d.problems[0].message,
    )


def test_a_spec_compressed_to_exactly_the_limit_is_written_one_byte_less_is_refused_with_what_fits() -> None:
    raw, wl = _job([("worker", 40)])
    pods = _pods(raw)
    stored = decide(wl, pods, previous=None, size_limit=2000).stored
    assert stored is not None and stored.compressed
    at = decide(wl, pods, previous=None, size_limit=stored.stored_bytes)
    assert at.stored == stored and not at.problems
    over = decide(wl, pods, previous=None, size_limit=stored.stored_bytes - 1)
    assert over.data is None and [p.reason for p in over.problems] == ["too_large"]
    message = over.problems[0].message
    assert (
        f"{stored.stored_bytes} bytes gzip-compressed, over the ConfigMap limit of {stored.stored_bytes - 1} bytes"
        in message
    )
    assert "About 39 members of this job fit one ConfigMap" in message  # 40 * (limit) // stored
    assert "rank table" not in message  # no table in this job: nothing to say about one


def test_a_rank_table_over_the_limit_names_the_table_version_as_a_way_out() -> None:
    raw, wl = _ascend_job(4)
    d = decide(wl, _ascend_pods(raw, 4), previous=None, size_limit=300)
    assert [p.reason for p in d.problems] == ["too_large"]
    assert "rank table version with shorter entries (the controller's --ranktable-version" in d.problems[0].message


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


# Ascend jobs: rank table version, annotations of the current plugins, rank index, super pods --------

NPU_KEY = "ascend.kubectl.kubernetes.io/ascend-npu-configuration"


def npu_template(resource: str = "huawei.com/Ascend910", npus: int = 2, selector: dict[str, str] | None = None) -> Any:
    template = pod_template(runtime="ascend-910", npus=npus)
    resources = template["spec"]["containers"][0]["resources"]
    for section in ("limits", "requests"):
        resources[section] = {resource: str(npus)}
    if selector:
        template["spec"]["nodeSelector"] = selector
    return template


def _ascend_job(
    n: int,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **kw: Any,
) -> tuple[dict[str, Any], WorkloadRecord]:
    raw = volcano_job("j", tasks=[("worker", n)], uid="job-uid", template=npu_template(**kw))
    raw["metadata"].setdefault("annotations", {}).update(annotations or {})
    raw["metadata"]["labels"].update(labels or {})
    return raw, workload_record(raw, label_key=LABEL)


def current_annotation(i: int, *, devices: int = 2, super_pod: int = 0, ip: str | None = None, **extra: Any) -> str:
    """The device annotation of the current device plugin for pod ``i``: server id = pod uid."""
    return json.dumps(
        {
            "pod_name": f"j-worker-{i}",
            "server_id": f"uid-{i}",
            "host_ip": f"10.0.{i // 250}.{i % 250 + 1}",
            "super_pod_id": super_pod,
            "rack_id": 0,
            "server_index": str(i),
            "server_ip": f"10.0.{i // 250}.{i % 250 + 1}",
            "devices": [
                {
                    "device_id": str(d),
                    "device_ip": ip if ip is not None else f"192.168.{d}.{i + 1}",
                    "super_device_id": str(37748736 + 16 * i + d),
                    **extra,
                }
                for d in range(devices)
            ],
        }
    )


def _ascend_pods(
    raw: dict[str, Any],
    n: int,
    *,
    key: str = "ascend.kubectl.kubernetes.io/ascend-910-configuration",
    text: Any = current_annotation,
    extra: Any = None,
) -> list[PodRecord]:
    pods = []
    for i in range(n):
        annotations = {key: text(i)}
        annotations.update(extra(i) if extra else {})
        pods.append(
            pod_record(
                volcano_pod(
                    raw,
                    task="worker",
                    index=i,
                    uid=f"pod-{i}",
                    ip=f"127.1.{i // 250}.{i % 250 + 1}",
                    host_ip=f"10.0.{i // 250}.{i % 250 + 1}",
                    phase="Running",
                    annotations=annotations,
                )
            )
        )
    return pods


def _table(d: Any) -> dict[str, Any]:
    assert d.spec.status == "completed" and d.data is not None, d.problems
    table: dict[str, Any] = json.loads(d.data["hccl.json"])
    return table


@pytest.mark.parametrize(
    ("annotations", "kw", "version"),
    [
        pytest.param({}, {}, "1.0", id="plain-910"),
        pytest.param({}, {"resource": "huawei.com/npu"}, "2.0", id="npu-resource"),
        pytest.param({"sp-block": "16"}, {}, "1.2", id="sp-block"),
        pytest.param({"huawei.com/schedule_policy": "chip2-node16-sp"}, {}, "1.2", id="policy-a3x16"),
        pytest.param({"huawei.com/schedule_policy": "chip2-node8-sp"}, {}, "1.2", id="policy-a3x8"),
        pytest.param({"huawei.com/schedule_policy": "multilevel"}, {}, "1.2", id="policy-multilevel"),
        pytest.param(
            {"huawei.com/schedule_policy": "multilevel"}, {"resource": "huawei.com/npu"}, "2.0", id="multilevel-npu"
        ),
        pytest.param(
            {"huawei.com/schedule_policy": "chip4-node8", "sp-block": "16"}, {}, "1.0", id="other-policy-wins"
        ),
        pytest.param(
            {}, {"selector": {"accelerator-type": "module-a3-16-super-pod"}}, "1.2", id="selector-a3x16-super-pod"
        ),
        pytest.param({}, {"selector": {"accelerator-type": "module-a3-8-super-pod"}}, "1.2", id="selector-a3x8"),
        pytest.param({}, {"selector": {"accelerator-type": "module"}}, "1.0", id="selector-other"),
    ],
)
def test_version_is_chosen_as_ascend_operator_does(annotations: dict[str, str], kw: Any, version: str) -> None:
    raw, wl = _ascend_job(2, annotations=annotations, **kw)
    assert wl.wants_devices and wl.ascend.table == version
    key = NPU_KEY if kw.get("resource") == "huawei.com/npu" else "ascend.kubectl.kubernetes.io/ascend-910-configuration"
    table = _table(decide(wl, _ascend_pods(raw, 2, key=key), previous=None))
    assert table["version"] == version


@pytest.mark.parametrize("forced", ["1.0", "1.2", "2.0", "v2", "v1"])
def test_the_flag_forces_a_version(forced: str) -> None:
    raw, wl = _ascend_job(2, resource="huawei.com/npu")  # auto would say 2.0
    table = _table(decide(wl, _ascend_pods(raw, 2, key=NPU_KEY), previous=None, hccl_version=forced))
    assert table.get("version", "v1") == {"v2": "1.0", "v1": "v1"}.get(forced, forced)


def test_1_0_carries_host_ip_container_ip_and_hardware_type() -> None:
    raw, wl = _ascend_job(2)
    pods = _ascend_pods(raw, 2, extra=lambda i: {"mind-cluster/hardware-type": "800I-A2-32G"})
    table = _table(decide(wl, pods, previous=None))
    assert [(s["server_id"], s["host_ip"], s["container_ip"], s["hardware_type"]) for s in table["server_list"]] == [
        ("uid-0", "10.0.0.1", "127.1.0.1", "800I-A2-32G"),
        ("uid-1", "10.0.0.2", "127.1.0.2", "800I-A2-32G"),
    ]
    d = decide(wl, pods, previous=None)
    assert spec_from_json(d.data["cluster.json"] if d.data else "") == d.spec


def test_huawei_npu_pods_with_the_newer_annotation_key_get_table_2_0_with_level_lists() -> None:
    levels = [
        {"level": 0, "info": {"UB": {"net_layer": 0, "net_instance_id": "sp-0", "net_type": "TOPO_FILE_DESC"}}},
        {"level": 3, "info": {"ROCE": {"net_layer": 3, "net_instance_id": "clos-1", "net_type": "CLOS"}}},
    ]
    raw, wl = _ascend_job(2, resource="huawei.com/npu")
    pods = _ascend_pods(raw, 2, key=NPU_KEY, text=lambda i: current_annotation(i, ip="-1", levelList=levels))
    table = _table(decide(wl, pods, previous=None))  # placeholder IPs: 2.0 does not use them
    assert table["rank_count"] == 4
    assert [(r["rank_id"], r["device_id"]) for r in table["rank_list"]] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert [e["net_instance_id"] for e in table["rank_list"][0]["level_list"]] == ["sp-0", "clos-1"]


def test_invalid_scale_out_label_blocks_a_2_0_job() -> None:
    raw, wl = _ascend_job(1, resource="huawei.com/npu", labels={"scaleout-type": "infiniband"})
    d = decide(wl, _ascend_pods(raw, 1, key=NPU_KEY), previous=None)
    assert d.data is None and [p.reason for p in d.problems] == ["invalid_workload"]
    assert "scaleout-type" in d.problems[0].message


def test_scale_out_label_picks_level_2() -> None:
    levels = [{"level": 2, "info": {"UBOE": {"net_layer": 2, "net_instance_id": "uboe"}}}]
    raw, wl = _ascend_job(1, resource="huawei.com/npu", labels={"scaleout-type": "uboe"})
    pods = _ascend_pods(raw, 1, key=NPU_KEY, text=lambda i: current_annotation(i, levelList=levels))
    table = _table(decide(wl, pods, previous=None))
    assert [e["net_instance_id"] for e in table["rank_list"][0]["level_list"]] == ["uboe"]


@pytest.mark.parametrize("placeholder", ["-.-.-.-", "-1"], ids=["dotted-dashes", "plugin-error-code"])
def test_placeholder_device_ip_is_an_invalid_annotation_for_table_1_0(placeholder: str) -> None:
    raw, wl = _ascend_job(2)
    pods = _ascend_pods(raw, 2, text=lambda i: current_annotation(i, ip=placeholder if i == 1 else None))
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "initializing"
    assert [p.reason for p in d.problems] == ["device_ip"]
    assert "pod j-worker-1" in d.problems[0].message and repr(placeholder) in d.problems[0].message


def test_two_node_super_pod_job() -> None:
    # An A3 job on two nodes of one super pod (sp-block: 16 chips = two 8-chip nodes per logical super pod).
    raw, wl = _ascend_job(2, annotations={"sp-block": "16"}, npus=8)
    pods = _ascend_pods(raw, 2, text=lambda i: current_annotation(i, devices=8, super_pod=7, ip="-1"))
    d = decide(wl, pods, previous=None)
    table = _table(d)
    assert table["version"] == "1.2" and table["server_count"] == "2"
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "uid-0"}, {"server_id": "uid-1"}]}
    ]
    assert table["server_list"][1]["device"][0] == {
        "device_id": "0",
        "device_ip": "-1",  # one super pod: the IP is not needed (ascend-operator's rule)
        "super_device_id": "37748752",
        "rank_id": "8",
    }
    assert [m.super_pod for m in d.spec.members] == ["0", "0"]


def test_sp_block_splits_servers_into_logical_super_pods() -> None:
    # ascend-operator's own case: sp-block 2 with 2-device servers is one server per logical super pod.
    raw, wl = _ascend_job(2, annotations={"sp-block": "2"})
    table = _table(decide(wl, _ascend_pods(raw, 2), previous=None))
    assert [(p["super_pod_id"], p["server_list"]) for p in table["super_pod_list"]] == [
        ("0", [{"server_id": "uid-0"}]),
        ("1", [{"server_id": "uid-1"}]),
    ]


def test_without_sp_block_the_physical_super_pods_group_the_servers_numbered_from_0() -> None:
    raw, wl = _ascend_job(3, selector={"accelerator-type": "module-a3-16-super-pod"})
    pods = _ascend_pods(raw, 3, text=lambda i: current_annotation(i, super_pod=[7, 3, 7][i]))
    table = _table(decide(wl, pods, previous=None))
    assert [(p["super_pod_id"], p["server_list"]) for p in table["super_pod_list"]] == [
        ("0", [{"server_id": "uid-1"}]),  # physical super pod 3
        ("1", [{"server_id": "uid-0"}, {"server_id": "uid-2"}]),  # physical super pod 7
    ]


def test_a_job_within_one_super_pod_is_super_pod_0_as_from_ascend_operator() -> None:
    raw, wl = _ascend_job(2, selector={"accelerator-type": "module-a3-16-super-pod"})
    pods = _ascend_pods(raw, 2, text=lambda i: current_annotation(i, super_pod=5))
    table = _table(decide(wl, pods, previous=None))
    assert [p["super_pod_id"] for p in table["super_pod_list"]] == ["0"]


def test_across_super_pods_a_placeholder_ip_does_not_count() -> None:
    raw, wl = _ascend_job(2, annotations={"sp-block": "2"})
    pods = _ascend_pods(raw, 2, text=lambda i: current_annotation(i, ip="-1"))
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "initializing"
    assert {p.reason for p in d.problems} == {"device_ip"}
    assert "spans 2 super pods" in d.problems[0].message


def test_1_2_needs_super_device_ids() -> None:
    raw, wl = _ascend_job(1, annotations={"sp-block": "16"})
    pods = _ascend_pods(raw, 1, text=lambda i: current_annotation(i).replace('"37748736"', '"-2"'))
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "initializing" and [p.reason for p in d.problems] == ["device_super_device_id"]


def test_soft_strategy_takes_super_pods_from_super_pod_rank() -> None:
    raw, wl = _ascend_job(2, annotations={"sp-block": "16"}, labels={"super-pod-affinity": "soft"})
    pods = _ascend_pods(raw, 2, extra=lambda i: {"super-pod-rank": str(1 - i)})
    table = _table(decide(wl, pods, previous=None))
    assert [(p["super_pod_id"], p["server_list"]) for p in table["super_pod_list"]] == [
        ("0", [{"server_id": "uid-1"}]),
        ("1", [{"server_id": "uid-0"}]),
    ]
    bad = _ascend_pods(raw, 2, extra=lambda i: {"super-pod-rank": "x"} if i else {"super-pod-rank": "0"})
    d = decide(wl, bad, previous=None)
    assert d.spec.status == "initializing" and [p.reason for p in d.problems] == ["invalid_super_pod"]


def test_volcano_rank_index_is_the_rank() -> None:
    raw, wl = _ascend_job(3)
    pods = _ascend_pods(raw, 3, extra=lambda i: {"hccl/rankIndex": str(2 - i)})
    d = decide(wl, pods, previous=None)
    assert [(m.rank, m.pod) for m in d.spec.members] == [(0, "j-worker-2"), (1, "j-worker-1"), (2, "j-worker-0")]
    table = _table(d)
    assert [s["server_id"] for s in table["server_list"]] == ["uid-2", "uid-1", "uid-0"]
    assert [dev["rank_id"] for s in table["server_list"] for dev in s["device"]] == ["0", "1", "2", "3", "4", "5"]
    assert d.data is not None and spec_from_json(d.data["cluster.json"]) == d.spec
    assert not d.problems


def test_rank_index_moves_npu_members_only() -> None:
    raw = volcano_job(
        "mix",
        tasks=[("scheduler", 1), ("worker", 2)],
        uid="job-uid",
        templates={"scheduler": pod_template(), "worker": npu_template()},
    )
    wl = workload_record(raw, label_key=LABEL)
    pods = [pod_record(volcano_pod(raw, task="scheduler", index=0, ip="127.1.0.9", phase="Running"))]
    for i in range(2):
        annotations = {"ascend.kubectl.kubernetes.io/ascend-910-configuration": current_annotation(i)}
        annotations["hccl/rankIndex"] = str(1 - i)
        pods.append(
            pod_record(
                volcano_pod(
                    raw, task="worker", index=i, ip=f"127.1.0.{i + 1}", phase="Running", annotations=annotations
                )
            )
        )
    d = decide(wl, pods, previous=None)
    assert [(m.rank, m.pod) for m in d.spec.members] == [
        (0, "mix-scheduler-0"),
        (1, "mix-worker-1"),
        (2, "mix-worker-0"),
    ]


@pytest.mark.parametrize(
    ("indices", "fragment"),
    [
        pytest.param(["0", "0", "1"], "hccl/rankIndex 0 is given to more than one pod", id="duplicate"),
        pytest.param(["0", "1", "3"], "not 0..2 (gaps)", id="gap"),
        pytest.param(["0", None, "1"], "1 of 3 NPU pods carry no hccl/rankIndex", id="partial"),
        pytest.param(["0", "one", "2"], "'one' is not a non-negative integer", id="not-a-number"),
    ],
)
def test_unusable_rank_index_is_a_warning_and_the_spec_order_stays(indices: list[str | None], fragment: str) -> None:
    raw, wl = _ascend_job(3)
    pods = _ascend_pods(raw, 3, extra=lambda i: {} if indices[i] is None else {"hccl/rankIndex": indices[i]})
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "completed"
    assert [m.pod for m in d.spec.members] == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert [p.reason for p in d.problems] == ["invalid_rank_index"]
    assert fragment in d.problems[0].message


# The 1 MiB ConfigMap limit at 1,024 servers x 8 devices, per version ----------------------------------

# A device's levelList as the A5 device plugin reports it (shape of ascend-operator's fixture, with
# EID addresses of 32 hex digits): UB on levels 0 and 1, UBOE on 2, RoCE on 3.
A5_LEVELS = [
    {
        "level": level,
        "info": {
            kind: {
                "net_layer": level,
                "net_instance_id": f"superpod-{level}",
                "net_type": "TOPO_FILE_DESC" if level < 2 else "CLOS",
                "net_attr": "",
                "rank_addr_list": [
                    {"addr_type": addr_type, "addr": addr, "ports": [f"0/{level}"], "plane_id": str(level)}
                ],
            }
        },
    }
    for level, kind, addr_type, addr in [
        (0, "UB", "EID", "0" * 32),
        (1, "UB", "EID", "1" * 32),
        (2, "UBOE", "IP", "192.168.200.1"),
        (3, "ROCE", "IP", "192.168.201.1"),
    ]
]


SIZE_CASES = [
    # (version, server ids, plain): server ids are the node's IP (HCCL-Controller's generation of the
    # device plugin) or the pod's uid (the current one); both with super_device_id and host_ip. plain:
    # the files fit the ConfigMap as plain keys (else they are stored gzip-compressed).
    ("v1", "node-ip", True),
    ("v2", "node-ip", True),
    ("1.0", "node-ip", True),
    ("1.2", "node-ip", False),
    ("2.0", "node-ip", False),
    ("v1", "pod-uid", True),
    ("v2", "pod-uid", True),
    ("1.0", "pod-uid", False),
    ("1.2", "pod-uid", False),
    ("2.0", "pod-uid", False),
]


@pytest.mark.parametrize(("version", "server_ids", "plain"), SIZE_CASES, ids=[f"{v}-{k}" for v, k, _ in SIZE_CASES])
def test_size_limit_at_1024_servers_by_8_devices(version: str, server_ids: str, plain: bool) -> None:
    n = 1024
    raw, wl = _ascend_job(n, npus=8, annotations={"sp-block": "16"})

    def text(i: int) -> str:
        value = json.loads(current_annotation(i, devices=8, super_pod=i // 16))
        value["server_id"] = value["host_ip"] if server_ids == "node-ip" else f"5c1e6a0e-7b7c-4d0e-9b1e-0c6f7a1d{i:04d}"
        for d in value["devices"]:
            d["device_ip"] = f"192.{168 + i // 256}.{i % 256}.{int(d['device_id']) + 1}"
            if version == "2.0":
                d["levelList"] = A5_LEVELS
        return json.dumps(value)

    pods = _ascend_pods(raw, n, text=text)
    d = decide(wl, pods, previous=None, hccl_version=version)
    assert d.spec.status == "completed" and not d.problems, d.problems[:1]
    assert d.data is not None and d.stored is not None
    print(
        f"FIGURE rank table {version} ({server_ids} server ids) at 1024x8: {d.stored.plain_bytes} bytes plain, "
        f"{d.stored.stored_bytes} stored, of {CONFIGMAP_DATA_LIMIT}"
    )
    assert d.stored.compressed is not plain
    assert d.stored.stored_bytes <= CONFIGMAP_DATA_LIMIT


@pytest.mark.parametrize(
    ("reason", "event"),
    [
        ("device_ip", "InvalidDeviceAnnotation"),
        ("device_super_device_id", "InvalidDeviceAnnotation"),
        ("invalid_rank_index", "InvalidRankIndex"),
        ("invalid_super_pod", "InvalidSuperPod"),
        ("too_large", "SpecTooLarge"),
    ],
)
def test_ascend_problems_become_these_event_reasons(reason: str, event: str) -> None:
    assert _event_reason(reason) == event


@pytest.mark.parametrize(
    ("own", "template", "version"),
    [
        pytest.param({"sp-block": "16"}, {}, "1.2", id="deployment-annotation"),
        pytest.param({}, {"sp-block": "16"}, "1.2", id="template-annotation"),
        pytest.param(
            {"huawei.com/schedule_policy": "chip2-node16-sp"},
            {"huawei.com/schedule_policy": "chip4-node8"},
            "1.0",
            id="template-wins",
        ),
    ],
)
def test_a_deployment_counts_its_template_annotations(
    own: dict[str, str], template: dict[str, str], version: str
) -> None:
    raw = {
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "d",
            "labels": {LABEL: "ascend-910"},
            "annotations": own,
        },
        "spec": {"replicas": 1, "template": {"metadata": {"annotations": template}, "spec": npu_template()["spec"]}},
    }
    assert deployment_record(raw, label_key=LABEL).ascend.table == version


# -- one rule each: blocked(), the device problem codes, the job status -------------


def _cm(*, managed: bool, job: str | None) -> ConfigMapRecord:
    return ConfigMapRecord(
        namespace="default", name="rings-config-j", uid="cm", resource_version="1", managed=managed,
        job=JobKey(job) if job else None, data={},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("cm", "reason"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param(_cm(managed=True, job=None), None, id="managed-no-job-yet"),
        pytest.param(_cm(managed=True, job="vcjob/default/j"), None, id="own"),
        pytest.param(_cm(managed=False, job="vcjob/default/j"), "foreign_configmap", id="foreign"),
        pytest.param(_cm(managed=True, job="vcjob/default/other"), "configmap_taken", id="taken"),
    ],
)
def test_blocked_takes_the_configmap_record_as_it_is(cm: ConfigMapRecord | None, reason: str | None) -> None:
    _, wl = _job([("worker", 1)])
    assert wl.key == "vcjob/default/j"
    problem = blocked(wl, cm)
    assert (problem.reason if problem else None) == reason


@pytest.mark.parametrize("reason", REASONS)
def test_device_problem_codes_say_device_once(reason: str) -> None:
    raw, _ = _job([("worker", 1)])
    (pod,) = _pods(raw)
    code = _device_problem(pod, reason, "m").reason
    assert code.startswith("device_") and "device_device" not in code
    assert code == f"device_{reason}" or reason.startswith("device_")
    assert _event_reason(code) == "InvalidDeviceAnnotation"


def test_the_device_problem_codes_are_distinct() -> None:
    raw, _ = _job([("worker", 1)])
    (pod,) = _pods(raw)
    codes = [_device_problem(pod, r, "m").reason for r in REASONS]
    assert len(set(codes)) == len(REASONS)
    assert {"device_ip", "device_id", "device_json"} <= set(codes)


def test_job_statuses_extend_the_spec_statuses() -> None:
    assert JOB_STATUSES == (*STATUSES, STATUS_INVALID) == ("initializing", "completed", "invalid")
    raw, wl = _job([("worker", 1)])
    assert decide(wl, [], previous=None).status == "initializing"
    assert decide(wl, _pods(raw), previous=None).status == "completed"
    assert decide(replace(wl, error="bad"), [], previous=None).status == STATUS_INVALID


@pytest.mark.parametrize("limit", [CONFIGMAP_DATA_LIMIT, 500], ids=["written", "too-large"])
def test_rendering_pauses_the_garbage_collector_and_always_resumes_it(limit: int) -> None:
    import gc

    raw, wl = _job([("worker", 40)])
    assert gc.isenabled()
    decide(wl, _pods(raw), previous=None, size_limit=limit)
    assert gc.isenabled()
    gc.disable()
    try:
        decide(wl, _pods(raw), previous=None, size_limit=limit)
        assert not gc.isenabled()  # a caller's choice is left as it was
    finally:
        gc.enable()
