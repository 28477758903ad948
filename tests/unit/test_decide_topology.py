"""Topology rank order as the decision applies it: opt-in, derived formats, rankIndex, replacements, restarts."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agent.decide import decide, explain
from model.keys import RANK_ORDER_ANNOTATION
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.topology import HOSTNAME_KEY, SUPER_POD_LEVEL, RankOrder
from model.volcano import workload_record
from ranktable.clusterspec import spec_from_json
from ranktable.hostfile import hostfile_text
from ranktable.tfconfig import tf_config
from ranktable.torchenv import torch_env
from tests.support.factories import volcano_job, volcano_pod
from tests.unit.test_decide import _ascend_job, _ascend_pods, current_annotation

LABEL = "ring-controller.atlas"
RACK = "cloud.provider.com/topology-rack"
SPINE = "cloud.provider.com/topology-block"
KEYS = (SPINE, RACK, HOSTNAME_KEY)
#: node -> (spine, rack): node i is in rack i % 2 (so spec order alternates racks)
NODES = {f"n{i}": (f"s{(i % 2) // 2}", f"r{i % 2}", f"n{i}") for i in range(8)}
ORDER = RankOrder(rule="topology", keys=KEYS, node_path=NODES.get)


def job(n: int, *, annotation: str | None = None) -> tuple[dict[str, Any], WorkloadRecord]:
    raw = volcano_job("j", tasks=[("worker", n)], uid="job-uid")
    if annotation is not None:
        raw["metadata"]["annotations"] = {RANK_ORDER_ANNOTATION: annotation}
    return raw, workload_record(raw, label_key=LABEL)


def pods(
    raw: dict[str, Any], n: int, *, nodes: list[str] | None = None, uids: list[str] | None = None
) -> list[PodRecord]:
    return [
        pod_record(
            volcano_pod(
                raw,
                task="worker",
                index=i,
                uid=(uids or [f"pod-{k}" for k in range(n)])[i],
                ip=f"127.1.0.{i + 1}",
                host_ip=f"10.0.0.{i + 1}",
                phase="Running",
                node=(nodes or [f"n{k}" for k in range(n)])[i],
            )
        )
        for i in range(n)
    ]


def test_spec_order_is_the_default_and_writes_the_same_text_as_before() -> None:
    raw, wl = job(4)
    d = decide(wl, pods(raw, 4), previous=None, order=RankOrder(keys=KEYS, node_path=NODES.get))
    assert [m.index for m in d.spec.members] == [0, 1, 2, 3]
    assert d.data is not None
    assert "rankOrder" not in d.data["cluster.json"] and "topology" not in d.data["cluster.json"]
    assert d.data == decide(wl, pods(raw, 4), previous=None).data


def test_the_job_annotation_opts_in_and_every_derived_format_follows() -> None:
    raw, wl = job(4, annotation="topology")
    d = decide(wl, pods(raw, 4), previous=None, order=RankOrder(keys=KEYS, node_path=NODES.get))
    # nodes n0, n2 are in rack r0, n1, n3 in r1: the ring goes n0 n2 n1 n3
    assert [(m.rank, m.pod, m.node) for m in d.spec.members] == [
        (0, "j-worker-0", "n0"),
        (1, "j-worker-2", "n2"),
        (2, "j-worker-1", "n1"),
        (3, "j-worker-3", "n3"),
    ]
    assert d.data is not None
    doc = json.loads(d.data["cluster.json"])
    assert doc["rankOrder"] == "topology"
    assert doc["topologyKeys"] == [SPINE, RACK, HOSTNAME_KEY]
    assert doc["members"][1]["topology"] == ["s0", "r0", "n2"]
    back = spec_from_json(d.data["cluster.json"])
    assert back == d.spec and back.members[1].topology == ("s0", "r0", "n2")
    tf = tf_config(back, pod="j-worker-2")
    assert tf["cluster"]["worker"] == ["127.1.0.1:2222", "127.1.0.3:2222", "127.1.0.2:2222", "127.1.0.4:2222"]
    assert tf["task"] == {"type": "worker", "index": 1}
    assert torch_env(back, pod="j-worker-2")["RANK"] == "1"
    assert torch_env(back, pod="j-worker-1")["MASTER_ADDR"] == "127.1.0.1"
    assert hostfile_text(back).split()[:3] == ["127.1.0.1", "slots=1", "127.1.0.3"]


def test_the_controller_flag_orders_every_job_and_the_annotation_opts_out() -> None:
    raw, wl = job(4)
    assert [m.index for m in decide(wl, pods(raw, 4), previous=None, order=ORDER).spec.members] == [0, 2, 1, 3]
    raw, wl = job(4, annotation="spec")
    assert [m.index for m in decide(wl, pods(raw, 4), previous=None, order=ORDER).spec.members] == [0, 1, 2, 3]


def test_a_bad_annotation_is_a_problem_and_the_controller_rule_applies() -> None:
    raw, wl = job(2, annotation="nearest")
    d = decide(wl, pods(raw, 2), previous=None, order=ORDER)
    assert [p.reason for p in d.problems] == ["invalid_rank_order"]
    assert "nearest" in d.problems[0].message
    assert d.spec.rank_order == "topology"


def test_restart_rebuilds_the_same_spec_and_writes_nothing() -> None:
    raw, wl = job(6, annotation="topology")
    first = decide(wl, pods(raw, 6), previous=None, order=ORDER)
    assert first.data is not None
    written = spec_from_json(first.data["cluster.json"])
    again = decide(wl, pods(raw, 6), previous=written, order=ORDER)
    assert again.data == first.data and again.spec.epoch == first.spec.epoch


def test_a_label_change_does_not_reorder_a_running_job() -> None:
    raw, wl = job(4, annotation="topology")
    first = decide(wl, pods(raw, 4), previous=None, order=ORDER)
    assert first.data is not None
    moved = {**NODES, "n0": ("s0", "r9", "n0")}
    again = decide(
        wl, pods(raw, 4), previous=spec_from_json(first.data["cluster.json"]), order=replace(ORDER, node_path=moved.get)
    )
    assert again.data == first.data


def test_a_replaced_pod_in_the_same_rack_keeps_its_rank_across_the_initializing_gap() -> None:
    raw, wl = job(4, annotation="topology")
    first = decide(wl, pods(raw, 4), previous=None, order=ORDER)
    assert first.data is not None
    held = spec_from_json(first.data["cluster.json"])
    # the pod at rank 0 (j-worker-0 on n0, rack r0) is replaced; the new one lands on n6 (rack r0 too).
    gap = decide(wl, pods(raw, 4)[1:], previous=held, order=ORDER)
    assert gap.spec.status == "initializing"
    new = pods(raw, 4, nodes=["n6", "n1", "n2", "n3"], uids=["new-0", "pod-1", "pod-2", "pod-3"])
    kept = decide(wl, new, previous=gap.spec, order=ORDER, held=held)
    assert [(m.rank, m.uid) for m in kept.spec.members] == [(0, "new-0"), (1, "pod-2"), (2, "pod-1"), (3, "pod-3")]
    assert kept.spec.epoch == first.spec.epoch + 2
    # without the held spec (a restart in the gap) the fresh order puts n6 after n2
    fresh = decide(wl, new, previous=gap.spec, order=ORDER)
    assert [m.uid for m in fresh.spec.members] == ["pod-2", "new-0", "pod-1", "pod-3"]


def test_rank_index_still_wins_for_npu_members() -> None:
    raw, wl = _ascend_job(3, annotations={RANK_ORDER_ANNOTATION: "topology"})
    ascend = _ascend_pods(raw, 3, extra=lambda i: {"hccl/rankIndex": str(i)})
    ascend = [replace(p, node=f"n{2 - i}") for i, p in enumerate(ascend)]
    nodes = {f"n{i}": ("s0", "r0", f"n{i}") for i in range(3)}
    d = decide(wl, ascend, previous=None, order=RankOrder(keys=KEYS, node_path=nodes.get))
    assert [m.pod for m in d.spec.members] == ["j-worker-0", "j-worker-1", "j-worker-2"]


def test_ascend_super_pod_is_a_level_above_the_host() -> None:
    raw, wl = _ascend_job(4, annotations={RANK_ORDER_ANNOTATION: "topology"})
    ascend = _ascend_pods(raw, 4, text=lambda i: current_annotation(i, super_pod=i % 2))
    ascend = [replace(p, node=f"n{i}") for i, p in enumerate(ascend)]
    nodes = {f"n{i}": ("s0", "r0", f"n{i}") for i in range(4)}
    d = decide(wl, ascend, previous=None, order=RankOrder(keys=KEYS, node_path=nodes.get), hccl_version="v2")
    assert [m.pod for m in d.spec.members] == ["j-worker-0", "j-worker-2", "j-worker-1", "j-worker-3"]
    assert d.spec.topology_keys == (SPINE, RACK, SUPER_POD_LEVEL, HOSTNAME_KEY)
    assert d.spec.members[1].topology == ("s0", "r0", "0", "n2")


def test_explain_shows_the_same_decision() -> None:
    raw, wl = job(4, annotation="topology")
    e = explain(wl, pods(raw, 4), previous=None, order=ORDER)
    assert e.decision.spec == decide(wl, pods(raw, 4), previous=None, order=ORDER).spec
    assert e.decision.spec.rank_order == "topology"


def test_a_tensorflow_chief_stays_rank_0_and_tf_configs_ring_follows_the_racks() -> None:
    raw = volcano_job("j", tasks=[("chief", 1), ("worker", 4)], uid="job-uid")
    raw["metadata"]["annotations"] = {RANK_ORDER_ANNOTATION: "topology"}
    wl = workload_record(raw, label_key=LABEL)
    nodes = {
        "c": ("s0", "r1", "c"),
        "w0": ("s0", "r0", "w0"),
        "w1": ("s0", "r1", "w1"),
        "w2": ("s0", "r0", "w2"),
        "w3": ("s0", "r1", "w3"),
    }
    members = [("chief", 0, "c")] + [("worker", i, f"w{i}") for i in range(4)]
    records = [
        pod_record(
            volcano_pod(
                raw,
                task=t,
                index=i,
                uid=f"{t}-{i}",
                ip=f"127.1.0.{n + 1}",
                host_ip="10.0.0.1",
                phase="Running",
                node=node,
            )
        )
        for n, (t, i, node) in enumerate(members)
    ]
    d = decide(wl, records, previous=None, order=RankOrder(keys=KEYS, node_path=nodes.get))
    by_rank = [(m.task, m.node) for m in d.spec.members]
    # sorted: w0 w2 (r0) c w1 w3 (r1); rotated to start at the chief: c w1 w3 w0 w2
    assert by_rank == [("chief", "c"), ("worker", "w1"), ("worker", "w3"), ("worker", "w0"), ("worker", "w2")]
    tf = tf_config(d.spec, pod="j-chief-0")
    assert tf["cluster"]["worker"] == ["127.1.0.3:2222", "127.1.0.5:2222", "127.1.0.2:2222", "127.1.0.4:2222"]
