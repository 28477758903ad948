"""The controller core on the real control plane: Volcano Jobs get their spec.

Pods are created the way Volcano's job controller creates them (names,
labels, annotations, a controller ownerReference to the Job), then bound by
the real scheduler and run by kwok, which gives them loopback IPs.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from tests.support.controllerproc import ControllerProcess
from tests.support.factories import device_annotation, pod_template, volcano_job
from tests.support.kubehelp import (
    SpecRecorder,
    all_members,
    create_pods,
    create_volcano_job,
    events_for,
    read_configmap,
    read_spec,
    running_pods,
    set_job_version,
    wait_for,
    wait_spec,
)

pytestmark = pytest.mark.integration


def _job(name: str, tasks: list[tuple[str, int]], **kw: Any) -> dict[str, Any]:
    templates = {t: pod_template(port=3000 + i) for i, (t, _) in enumerate(tasks)}
    return volcano_job(name, tasks=tasks, templates=templates, **kw)


def test_two_task_job_completes_in_rank_order_with_real_ips(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    job = create_volcano_job(k8s, namespace, _job("tf", [("chief", 1), ("worker", 3)]))
    members = all_members(job)
    # Create pods in reverse: arrival order must not decide ranks.
    pods = create_pods(k8s, job, list(reversed(members)))
    spec = wait_spec(k8s, namespace, "rings-config-tf")
    live = wait_for(lambda: running_pods(k8s, namespace, [p["metadata"]["name"] for p in pods]), what="pods running")
    assert spec["job"]["uid"] == job["metadata"]["uid"]
    assert spec["expected"] == 4 and len(spec["members"]) == 4
    assert [(m["rank"], m["task"], m["index"]) for m in spec["members"]] == [
        (0, "chief", 0),
        (1, "worker", 0),
        (2, "worker", 1),
        (3, "worker", 2),
    ]
    for m in spec["members"]:
        pod = live[m["pod"]]
        assert m["ip"] == pod.status.pod_ip and m["ip"].startswith("127.1.")
        assert m["uid"] == pod.metadata.uid
        assert m["node"] == pod.spec.node_name
        assert m["port"] == (3000 if m["task"] == "chief" else 3001)
    cm = read_configmap(k8s, namespace, "rings-config-tf")
    assert cm.metadata.labels["ring-controller.io/managed"] == "true"
    assert [o.uid for o in cm.metadata.owner_references] == [job["metadata"]["uid"]]
    reasons = wait_for(
        lambda: [e.reason for e in events_for(k8s, namespace, "tf") if e.reason == "SpecCompleted"],
        what="SpecCompleted event",
    )
    assert reasons == ["SpecCompleted"]


def test_replaced_member_leaves_completed_then_completes_with_higher_epoch(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    job = create_volcano_job(k8s, namespace, _job("rep", [("worker", 2)]))
    create_pods(k8s, job, all_members(job))
    first = wait_spec(k8s, namespace, "rings-config-rep")
    recorder = SpecRecorder(k8s, namespace, "rings-config-rep")
    victim = first["members"][1]
    k8s.core.delete_namespaced_pod(victim["pod"], namespace, grace_period_seconds=0)
    wait_for(
        lambda: read_spec(k8s, namespace, "rings-config-rep")["status"] == "initializing", what="spec leaves completed"
    )  # type: ignore[index]
    wait_for(lambda: _gone(k8s, namespace, victim["pod"]), what="pod deleted")
    create_pods(k8s, job, [("worker", 1)])
    second = wait_spec(k8s, namespace, "rings-config-rep", where=lambda s: s["epoch"] > first["epoch"])
    seen = recorder.stop()
    assert second["members"][1]["uid"] != victim["uid"]
    assert second["members"][0] == first["members"][0]
    assert ("initializing", first["epoch"] + 1) in seen
    assert second["epoch"] == first["epoch"] + 2


def _gone(k8s: Any, namespace: str, name: str) -> bool:
    return name not in {p.metadata.name for p in k8s.core.list_namespaced_pod(namespace).items}


def test_job_version_bump_ignores_old_version_pods(k8s: Any, namespace: str, controller: ControllerProcess) -> None:
    job = create_volcano_job(k8s, namespace, _job("ver", [("worker", 2)]))
    old = create_pods(k8s, job, all_members(job), version=0)
    first = wait_spec(k8s, namespace, "rings-config-ver")
    assert first["job"]["version"] == 0
    set_job_version(k8s, namespace, "ver", 1)
    # Old pods still run, but belong to version 0: the spec must not stay completed.
    bumped = wait_spec(
        k8s, namespace, "rings-config-ver", status="initializing", where=lambda s: s["job"]["version"] == 1
    )
    assert bumped["members"] == []
    for pod in old:
        k8s.core.delete_namespaced_pod(pod["metadata"]["name"], namespace, grace_period_seconds=0)
    for pod in old:
        wait_for(lambda name=pod["metadata"]["name"]: _gone(k8s, namespace, name), what="old pod gone")
    new = create_pods(k8s, job, all_members(job), version=1)
    final = wait_spec(k8s, namespace, "rings-config-ver", where=lambda s: s["job"]["version"] == 1)
    assert sorted(m["uid"] for m in final["members"]) == sorted(p["metadata"]["uid"] for p in new)
    assert final["epoch"] > first["epoch"]


def test_foreign_configmap_is_never_modified(k8s: Any, namespace: str, controller: ControllerProcess) -> None:
    foreign = k8s.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "rings-config-hccl"}, "data": {"hccl.json": '{"status":"initializing"}'}}
    )
    job = create_volcano_job(k8s, namespace, _job("hccl", [("worker", 1)]))
    create_pods(k8s, job, all_members(job))
    warning = wait_for(
        lambda: [e for e in events_for(k8s, namespace, "hccl") if e.reason == "ForeignConfigMap"],
        what="ForeignConfigMap event",
    )
    assert warning[0].type == "Warning" and "rings-config-hccl" in warning[0].message
    cm = read_configmap(k8s, namespace, "rings-config-hccl")
    assert cm.metadata.resource_version == foreign.metadata.resource_version
    assert cm.data == {"hccl.json": '{"status":"initializing"}'}


def test_malformed_device_annotation_never_completes_and_warns(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    job = create_volcano_job(
        k8s,
        namespace,
        volcano_job(
            "npu-bad", tasks=[("worker", 2)], runtime="ascend-910", template=pod_template(runtime="ascend-910")
        ),
    )
    create_pods(k8s, job, [("worker", 0)], devices=device_annotation("10.0.0.1", [("0", "192.168.0.1")]))
    create_pods(
        k8s,
        job,
        [("worker", 1)],
        devices='{"server_id": "10.0.0.2", "devices": [{"device_id": "0", "device_ip": "not-an-ip"}]}',
    )
    warning = wait_for(
        lambda: [e for e in events_for(k8s, namespace, "npu-bad") if e.reason == "InvalidDeviceAnnotation"],
        what="InvalidDeviceAnnotation event",
    )
    assert warning[0].type == "Warning" and "npu-bad-worker-1" in warning[0].message
    wait_for(lambda: running_pods(k8s, namespace, ["npu-bad-worker-0", "npu-bad-worker-1"]), what="pods running")
    spec = wait_spec(k8s, namespace, "rings-config-npu-bad", status="initializing")
    assert spec["members"] == []
    assert (
        json.loads(read_configmap(k8s, namespace, "rings-config-npu-bad").data["hccl.json"])["status"] == "initializing"
    )


def test_valid_npu_job_gets_hccl_v2_table(k8s: Any, namespace: str, controller: ControllerProcess) -> None:
    job = create_volcano_job(
        k8s,
        namespace,
        volcano_job("npu", tasks=[("worker", 2)], runtime="ascend-910", template=pod_template(runtime="ascend-910")),
    )
    for i in range(2):
        create_pods(
            k8s,
            job,
            [("worker", i)],
            devices=device_annotation(f"10.0.0.{i + 1}", [("0", f"192.168.{i}.1"), ("1", f"192.168.{i}.2")]),
        )
    members = wait_spec(k8s, namespace, "rings-config-npu")["members"]
    table = json.loads(read_configmap(k8s, namespace, "rings-config-npu").data["hccl.json"])
    assert table["status"] == "completed"
    assert [d["rank_id"] for s in table["server_list"] for d in s["device"]] == ["0", "1", "2", "3"]
    # The annotation's server ids, unless the pods have nodes of their own: then their nodes' IPs
    # (ascend-operator's onePodOneNode; this annotation has no host_ip, so the pod's hostIP).
    pods = {p.metadata.name: p for p in k8s.core.list_namespaced_pod(namespace).items}
    hosts = [pods[m["pod"]].status.host_ip for m in members]
    apart = members[0]["node"] != members[1]["node"]
    assert [s["server_id"] for s in table["server_list"]] == (hosts if apart else ["10.0.0.1", "10.0.0.2"])


def test_controller_killed_midway_and_restarted_rebuilds_without_spurious_epoch(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    job = create_volcano_job(k8s, namespace, _job("crash", [("chief", 1), ("worker", 3)]))
    members = all_members(job)
    create_pods(k8s, job, members[:2])
    wait_spec(k8s, namespace, "rings-config-crash", status="initializing")
    controller.stop(signal.SIGKILL)
    create_pods(k8s, job, members[2:])
    wait_for(lambda: running_pods(k8s, namespace, [f"crash-{t}-{i}" for t, i in members]), what="pods running")
    controller.start()
    spec = wait_spec(k8s, namespace, "rings-config-crash")
    assert spec["epoch"] == 1  # initializing (0) -> completed (1), as without the crash
    assert [m["pod"] for m in spec["members"]] == [f"crash-{t}-{i}" for t, i in members]
    rv = read_configmap(k8s, namespace, "rings-config-crash").metadata.resource_version
    # A restart with nothing changed writes nothing.
    controller.stop(signal.SIGTERM)
    controller.start()
    wait_for(
        lambda: controller.metric("ringcontroller_jobs", kind="vcjob", status="completed") == 1.0,
        what="job synced after restart",
    )
    assert read_configmap(k8s, namespace, "rings-config-crash").metadata.resource_version == rv
    assert read_spec(k8s, namespace, "rings-config-crash") == spec


def _npu_template(resource: str) -> dict[str, Any]:
    template = pod_template(runtime="ascend-910", npus=2)
    template["spec"]["containers"][0]["resources"] = {"limits": {resource: "2"}, "requests": {resource: "2"}}
    return template


def test_ascend_operator_tables_through_the_real_api(k8s: Any, namespace: str, controller: ControllerProcess) -> None:
    # 2.0: the huawei.com/npu resource, the newer annotation key, Volcano's hccl/rankIndex reversing the ranks.
    npu = create_volcano_job(
        k8s, namespace, volcano_job("a5", tasks=[("worker", 2)], template=_npu_template("huawei.com/npu"))
    )
    levels = [{"level": 0, "info": {"UB": {"net_layer": 0, "net_instance_id": "sp-0", "net_type": "TOPO_FILE_DESC"}}}]
    for i in range(2):
        value = {
            "pod_name": f"a5-worker-{i}",
            "server_id": f"uid-{i}",
            "host_ip": f"10.0.0.{i + 1}",
            "devices": [{"device_id": str(d), "device_ip": "-1", "levelList": levels} for d in range(2)],
        }
        annotations = {
            "ascend.kubectl.kubernetes.io/ascend-npu-configuration": json.dumps(value),
            "hccl/rankIndex": str(1 - i),
        }
        create_pods(k8s, npu, [("worker", i)], annotations=annotations)
    spec = wait_spec(k8s, namespace, "rings-config-a5")
    assert [m["pod"] for m in spec["members"]] == ["a5-worker-1", "a5-worker-0"]
    table = json.loads(read_configmap(k8s, namespace, "rings-config-a5").data["hccl.json"])
    assert (table["version"], table["rank_count"]) == ("2.0", 4)
    assert [e["net_instance_id"] for r in table["rank_list"] for e in r["level_list"]] == ["sp-0"] * 4

    # 1.2: sp-block on the job (two 2-chip servers per logical super pod).
    raw = volcano_job("a3", tasks=[("worker", 2)], template=_npu_template("huawei.com/Ascend910"))
    raw["metadata"]["annotations"] = {"sp-block": "4"}
    a3 = create_volcano_job(k8s, namespace, raw)
    for i in range(2):
        value = {
            "server_id": f"uid-{i}",
            "host_ip": f"10.0.0.{i + 1}",
            "super_pod_id": 0,
            "devices": [
                {"device_id": str(d), "device_ip": f"192.168.{d}.{i + 1}", "super_device_id": str(8 * i + d)}
                for d in range(2)
            ],
        }
        create_pods(k8s, a3, [("worker", i)], devices=value)
    members = wait_spec(k8s, namespace, "rings-config-a3")["members"]
    table = json.loads(read_configmap(k8s, namespace, "rings-config-a3").data["hccl.json"])
    assert table["version"] == "1.2"
    # ascend-operator's onePodOneNode: on nodes of their own the servers are named by the node's IP.
    apart = members[0]["node"] != members[1]["node"]
    ids = ["10.0.0.1", "10.0.0.2"] if apart else ["uid-0", "uid-1"]
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": ids[0]}, {"server_id": ids[1]}]}
    ]
    assert [s["container_ip"] for s in table["server_list"]] == [
        m["ip"] for m in wait_spec(k8s, namespace, "rings-config-a3")["members"]
    ]
