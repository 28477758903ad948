"""LeaderWorkerSets on plain JSON: one job per group, leader first, groups independent."""

from __future__ import annotations

from typing import Any

from agent.decide import decide
from model import lws
from model.kinds import KINDS, identify_pod
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.serving import serving_workload
from tests.support.factories import leader_worker_set, lws_pod

LABEL = "ring-controller.atlas"


def served(record: WorkloadRecord, key: str) -> WorkloadRecord | None:
    kind = next(k for k in KINDS if k.short == lws.SHORT)
    return serving_workload(
        key,  # type: ignore[arg-type]
        lookup=lambda k, name: record if k is kind and name == f"{record.namespace}/{record.name}" else None,
        runtime_nodes=lambda _: None,
    )


def group_pods(raw: dict[str, Any], group: int, workers: list[int], *, net: int = 1) -> list[PodRecord]:
    return [
        pod_record(lws_pod(raw, group=group, worker=w, ip=f"127.{net}.{group}.{w + 1}", phase="Running"))
        for w in workers
    ]


def test_each_group_is_a_job_of_its_own_with_its_own_configmap() -> None:
    raw = leader_worker_set("llm", replicas=2, size=3, uid="lws-uid")
    rec = lws.workload_record(raw, label_key=LABEL)
    assert rec.error is None and rec.groups == 2
    assert rec.job_keys == ("lws/default/llm-0", "lws/default/llm-1")
    assert served(rec, "lws/default/llm") is None  # the set itself is no job
    assert served(rec, "lws/default/llm-2") is None  # no such group
    one = served(rec, "lws/default/llm-1")
    assert one is not None and one.key == "lws/default/llm-1" and one.group == 1
    assert (one.configmap, one.expected, one.job_name, one.name) == ("rings-config-llm-1", 3, "llm-1", "llm")
    assert one.owner_reference()["uid"] == "lws-uid"


def test_a_group_ranks_its_leader_first_then_its_workers_and_ignores_other_groups() -> None:
    raw = leader_worker_set("llm", replicas=2, size=3, uid="lws-uid")
    group = served(lws.workload_record(raw, label_key=LABEL), "lws/default/llm-1")
    assert group is not None
    identity = identify_pod(lws_pod(raw, group=1, worker=2)["metadata"])
    assert identity is not None and (identity.job, identity.index) == ("lws/default/llm-1", 2)
    pods = group_pods(raw, 1, [2, 0, 1])
    d = decide(group, pods, previous=None)
    assert [(m.rank, m.pod) for m in d.spec.members] == [(0, "llm-1"), (1, "llm-1-1"), (2, "llm-1-2")]
    # Group 0's pods never reach group 1 (they name another job); a group alone completes alone.
    assert all(p.job == "lws/default/llm-0" for p in group_pods(raw, 0, [0, 1, 2]))


def test_a_recreated_group_is_a_new_epoch_of_that_group_only() -> None:
    raw = leader_worker_set("llm", replicas=2, size=2, uid="lws-uid")
    rec = lws.workload_record(raw, label_key=LABEL)
    g0, g1 = served(rec, "lws/default/llm-0"), served(rec, "lws/default/llm-1")
    assert g0 is not None and g1 is not None
    first0 = decide(g0, group_pods(raw, 0, [0, 1]), previous=None)
    first1 = decide(g1, group_pods(raw, 1, [0, 1]), previous=None)
    # Group 1 recreated (RecreateGroupOnPodRestart): new pods, new IPs.
    recreated = [
        pod_record(lws_pod(raw, group=1, worker=w, uid=f"new-{w}", ip=f"127.9.1.{w + 1}", phase="Running"))
        for w in (0, 1)
    ]
    again1 = decide(g1, recreated, previous=first1.spec)
    again0 = decide(g0, group_pods(raw, 0, [0, 1]), previous=first0.spec)
    assert again1.spec.epoch == first1.spec.epoch + 1 and again1.spec.status == "completed"
    assert again0.spec == first0.spec


def test_a_template_mounting_rings_config_or_unlabelled_is_invalid() -> None:
    raw = leader_worker_set("llm")
    template = raw["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    template["spec"]["volumes"] = [{"name": "rings-config", "configMap": {"name": "rings-config-llm"}}]
    error = lws.workload_record(raw, label_key=LABEL).error
    assert error is not None and "each group has its own ConfigMap" in error
    raw = leader_worker_set("llm")
    raw["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = {"metadata": {"labels": {}}, "spec": {"containers": []}}
    error = lws.workload_record(raw, label_key=LABEL).error
    assert error is not None and error.startswith("leaderTemplate: the pod template has no label")


def test_a_scale_down_queues_the_dropped_group_so_its_worker_is_forgotten() -> None:
    from tests.support.memoryapi import MemoryAPI
    from tests.unit.test_agent import Caches

    caches = Caches(MemoryAPI())
    agent = caches.agent()
    three = lws.workload_record(leader_worker_set("llm", replicas=3, uid="lws-uid"), label_key=LABEL)
    two = lws.workload_record(leader_worker_set("llm", replicas=2, uid="lws-uid"), label_key=LABEL)
    agent.on_workload(None, three)
    agent.on_workload(three, two)
    assert caches.enqueued == [f"lws/default/llm-{g}" for g in (0, 1, 2)] * 2


def test_the_shipped_example_is_valid_and_each_group_reads_its_own_configmap() -> None:
    from pathlib import Path

    import yaml

    from ringcontroller.kubectl_ring.jobs import launch_setup

    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "build/examples/lws/tf-lws.yaml").read_text())
    raw["metadata"]["namespace"] = "ml"
    rec = lws.workload_record(raw, label_key=LABEL)
    assert rec.error is None and rec.job_keys == ("lws/ml/tf-lws-0", "lws/ml/tf-lws-1") and rec.expected == 4
    group = served(rec, "lws/ml/tf-lws-1")
    assert group is not None and group.configmap == "rings-config-tf-lws-1"
    # The launcher's ConfigMap, as the kubelet expands $(LWS_GROUP) from the pod's group label.
    pod = lws_pod(raw, group=1, worker=2)
    setup = launch_setup(pod)
    assert setup.from_api and setup.configmap == "rings-config-tf-lws-$(LWS_GROUP)"
    labels = pod["metadata"]["labels"]
    assert setup.configmap.replace("$(LWS_GROUP)", labels["leaderworkerset.sigs.k8s.io/group-index"]) == group.configmap
