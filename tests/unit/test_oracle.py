"""The chaos oracle against ``decide()``: two independent readings of the contract must agree.

A disagreement means one of them is wrong; the chaos runs trust the oracle,
so it is checked here on generated Volcano Jobs, Deployments, Indexed Jobs,
StatefulSets and PodGroups (task orders not alphabetical, pods in every state,
replacements overlapping).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.decide import decide
from model import indexedjob, podgroup
from model import statefulset as statefulset_model
from model.deployment import workload_record as deployment_record
from model.pod import as_group_member, pod_record
from model.volcano import workload_record as volcano_record
from ranktable.clusterspec import CLUSTER_FILE
from tests.support import oracle
from tests.support.factories import (
    group_pod,
    indexed_job,
    job_pod,
    pod_group,
    pod_template,
    statefulset,
    statefulset_pod,
    volcano_job,
    volcano_pod,
)

LABEL = "ring-controller.atlas"
NAMES = ("worker", "chief", "zeta", "alpha", "ps")
STATE = st.sampled_from(["running", "pending", "no_ip", "deleting", "old_version", "stranger"]) | st.just("running")


def configmap(data: dict[str, str] | None) -> dict[str, Any] | None:
    return {"data": data} if data is not None else None


@settings(max_examples=30)
@given(
    tasks=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True).flatmap(
        lambda names: st.lists(st.integers(0, 3) | st.integers(1, 3), min_size=len(names), max_size=len(names)).map(
            lambda counts: list(zip(names, counts, strict=True))
        )
    ),
    complete=st.booleans(),
    data=st.data(),
)
def test_oracle_agrees_with_decide_on_volcano_jobs(tasks: list[tuple[str, int]], complete: bool, data: Any) -> None:
    raw = volcano_job("j", namespace="ns", tasks=tasks, uid="job-uid")
    pods = []
    for ti, (t, n) in enumerate(tasks):
        for i in range(n):
            states = data.draw(st.lists(STATE, max_size=2))
            if complete:
                states = ["running", *states]  # every slot can count: the case where ranks are compared
            for k, state in enumerate(states):
                pod = volcano_pod(
                    raw, task=t, index=i, uid=f"{t}-{i}-{k}", ip="" if state == "no_ip" else f"127.{1 + ti}.{k}.{i + 1}",
                    phase="Pending" if state == "pending" else "Running", version=7 if state == "old_version" else 0,
                    name_suffix=f"-r{k}" if k else "",
                )  # fmt: skip
                pod["metadata"]["creationTimestamp"] = f"2026-11-29T00:00:0{(k + 1) // 2}Z"  # k 1 and 2 tie
                if state == "deleting":
                    pod["metadata"]["deletionTimestamp"] = "2026-11-29T00:01:00Z"
                if state == "stranger":
                    pod["metadata"]["ownerReferences"][0]["uid"] = "older-job"
                pods.append(pod)
    raw["metadata"]["namespace"] = "ns"
    d = decide(volcano_record(raw, label_key=LABEL), [pod_record(p) for p in pods], previous=None)
    assert d.data is not None
    expected = oracle.expect_volcano(raw, pods)
    assert oracle.mismatch(expected, configmap(d.data)) is None, (expected, json.loads(d.data[CLUSTER_FILE]))


def _deployment_pod(name: str, k: int, state: str) -> dict[str, Any]:
    template = pod_template()
    return {
        "metadata": {
            "name": f"d-abc-{name}",
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {**template["metadata"]["labels"], "pod-template-hash": "abc"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "d-abc", "uid": "rs", "controller": True}],
            "creationTimestamp": f"2026-11-29T00:00:0{k % 3}Z",
            **({"deletionTimestamp": "2026-11-29T00:01:00Z"} if state == "deleting" else {}),
        },
        "spec": template["spec"],
        "status": {"phase": "Pending" if state == "pending" else "Running", "podIP": f"127.1.0.{k + 1}"},
    }


@settings(max_examples=30)
@given(replicas=st.integers(0, 4), states=st.lists(st.sampled_from(["running", "pending", "deleting"]), max_size=6))
def test_oracle_agrees_with_decide_on_deployments(replicas: int, states: list[str]) -> None:
    raw = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns", "uid": "d-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {"replicas": replicas, "template": pod_template()},
    }
    pods = [_deployment_pod(f"p{k}", k, s) for k, s in enumerate(states)]
    d = decide(deployment_record(raw, label_key=LABEL), [pod_record(p) for p in pods], previous=None)
    assert d.data is not None
    assert oracle.mismatch(oracle.expect_deployment(raw, pods), configmap(d.data)) is None


def _stated(pod: dict[str, Any], state: str) -> dict[str, Any]:
    """``pod`` in generated ``state`` (running, pending, no_ip, deleting, failed)."""
    status = pod.setdefault("status", {"hostIP": "10.0.0.1"})
    status["phase"] = {"pending": "Pending", "failed": "Failed"}.get(state, "Running")
    if state == "no_ip":
        status["podIP"] = ""
    if state == "deleting":
        pod["metadata"]["deletionTimestamp"] = "2026-11-29T00:01:00Z"
    return pod


INDEXED_STATE = st.sampled_from(["running", "pending", "no_ip", "deleting", "failed"]) | st.just("running")


@settings(max_examples=30)
@given(completions=st.integers(0, 4), parallel=st.booleans(), data=st.data())
def test_oracle_agrees_with_decide_on_indexed_jobs(completions: int, parallel: bool, data: Any) -> None:
    raw = indexed_job("j", completions, parallelism=completions if parallel else max(0, completions - 1))
    raw["metadata"].update(namespace="ns", uid="job-uid")
    pods = []
    for index in range(completions + 1):  # one index beyond completions: fills nothing
        for k, state in enumerate(data.draw(st.lists(INDEXED_STATE, max_size=2))):
            pod = job_pod(raw, index=index, suffix=f"s{k}", ip=f"127.1.{k}.{index + 1}")
            pods.append(_stated(pod, state))
    for p in pods:
        p["metadata"]["namespace"] = "ns"
    d = decide(indexedjob.workload_record(raw, label_key=LABEL), [pod_record(p) for p in pods], previous=None)
    expected = oracle.expect_indexed_job(raw, pods)
    if d.data is None:  # invalid (parallelism below completions): nothing written, the oracle never completes it
        assert expected.status == "initializing" and not (parallel or completions == 0)
        return
    assert oracle.mismatch(expected, configmap(d.data)) is None, (expected, json.loads(d.data[CLUSTER_FILE]))


@settings(max_examples=30)
@given(replicas=st.integers(0, 4), start=st.sampled_from([0, 3]), data=st.data())
def test_oracle_agrees_with_decide_on_statefulsets(replicas: int, start: int, data: Any) -> None:
    raw = statefulset("s", replicas, namespace="ns", uid="sts-uid", start=start or None)
    pods = []
    for ordinal in range(start, start + replicas + 1):
        states = data.draw(st.lists(INDEXED_STATE, max_size=1))
        pods += [_stated(statefulset_pod(raw, ordinal=ordinal, ip=f"127.2.0.{ordinal + 1}"), s) for s in states]
    d = decide(statefulset_model.workload_record(raw, label_key=LABEL), [pod_record(p) for p in pods], previous=None)
    assert d.data is not None
    expected = oracle.expect_statefulset(raw, pods)
    assert oracle.mismatch(expected, configmap(d.data)) is None, (expected, json.loads(d.data[CLUSTER_FILE]))


FINISH = st.sampled_from(["running", "succeeded", "replaced", "failed"]) | st.just("succeeded")


@settings(max_examples=40)
@given(completions=st.integers(1, 4), data=st.data())
def test_oracle_agrees_with_decide_on_finished_members(completions: int, data: Any) -> None:
    """After a completed spec, members finish, fail or are replaced: finished ones keep their
    places only while nothing else in the spec changes (both readings, from the written spec)."""
    raw = indexed_job("j", completions)
    raw["metadata"].update(namespace="ns", uid="job-uid")
    first = [_stated(job_pod(raw, index=i, ip=f"127.1.0.{i + 1}"), "running") for i in range(completions)]
    for p in first:
        p["metadata"]["namespace"] = "ns"
    record = indexedjob.workload_record(raw, label_key=LABEL)
    written = decide(record, [pod_record(p) for p in first], previous=None)
    assert written.data is not None and written.spec.status == "completed"
    pods = []
    for i, pod in enumerate(first):
        fate = data.draw(FINISH)
        if fate in ("succeeded", "failed"):
            pod["status"]["phase"] = fate.capitalize()
        if fate == "replaced":  # the old pod is gone, a new one runs under the index
            pod = _stated(job_pod(raw, index=i, suffix="new", uid=f"new-{i}", ip=f"127.1.9.{i + 1}"), "running")
            pod["metadata"]["namespace"] = "ns"
        pods.append(pod)
    d = decide(record, [pod_record(p) for p in pods], previous=written.spec)
    assert d.data is not None
    cms = {"rings-config-j": configmap(written.data)}
    expected = oracle.expect_indexed_job(raw, pods, configmaps=cms)
    assert oracle.mismatch(expected, configmap(d.data)) is None, (expected, json.loads(d.data[CLUSTER_FILE]))


RANKS = st.sampled_from(["0", "1", "2", "3", "9", "-1", "x", None])


@settings(max_examples=40)
@given(min_count=st.integers(1, 3), basic=st.booleans(), data=st.data())
def test_oracle_agrees_with_decide_on_podgroups(min_count: int, basic: bool, data: Any) -> None:
    raw = pod_group("g", min_count, namespace="ns", uid="pg-uid", basic=basic and min_count == 1)
    pods = []
    for k, (rank, state) in enumerate(data.draw(st.lists(st.tuples(RANKS, INDEXED_STATE), max_size=5))):
        pod = group_pod("g", f"p{k}", rank=rank, namespace="ns", ip=f"127.3.0.{k + 1}")
        pods.append(_stated(pod, state))
    if data.draw(st.booleans()):  # a pod of another group, with a rank this one would take
        pods.append(_stated(group_pod("other", "stray", rank="0", namespace="ns", ip="127.3.1.1"), "running"))
    record = podgroup.workload_record(raw, label_key=LABEL)
    d = decide(
        record, [as_group_member(pod_record(p)) for p in pods if pod_record(p).group == record.key], previous=None
    )
    expected = oracle.expect_podgroup(raw, pods)
    if d.data is None:  # no gang count: invalid, nothing written; the oracle never completes it
        assert expected.status == "initializing" and record.error is not None
        return
    assert oracle.mismatch(expected, configmap(d.data)) is None, (expected, json.loads(d.data[CLUSTER_FILE]))
