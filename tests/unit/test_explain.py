"""``explain()``: the reasons a spec is not complete, per slot, on plain records.

Each case breaks one member in one way and checks that the slot says so in
the state and wording a user is shown, that the other slots still count, and
that the decision inside is the controller's own (``decide()`` on the same
input).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agent.decide import decide, explain
from model.deployment import workload_record as deployment_record
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.volcano import workload_record
from ringcontroller.kubectl_ring import render
from tests.support.factories import device_annotation, pod_template, volcano_job, volcano_pod

LABEL = "ring-controller.atlas"
GOOD_DEVICES = device_annotation("10.0.0.1", [("0", "192.168.0.1")])


def _job(replicas: int = 2, **kw: Any) -> tuple[dict[str, Any], WorkloadRecord]:
    raw = volcano_job("j", tasks=[("worker", replicas)], uid="job-uid", **kw)
    return raw, workload_record(raw, label_key=LABEL)


def _pod(raw: dict[str, Any], index: int, **kw: Any) -> PodRecord:
    defaults: dict[str, Any] = {"ip": f"127.1.0.{index + 1}", "phase": "Running", "node": "n1", "uid": f"u{index}"}
    return pod_record(volcano_pod(raw, task="worker", index=index, **{**defaults, **kw}))


def test_a_complete_job_has_every_slot_counting_and_nothing_waiting() -> None:
    raw, wl = _job()
    pods = [_pod(raw, 0), _pod(raw, 1)]
    e = explain(wl, pods, previous=None)
    assert [(s.rank, s.task, s.index, s.state) for s in e.slots] == [
        (0, "worker", 0, "counting"),
        (1, "worker", 1, "counting"),
    ]
    assert e.waiting == () and e.ignored == ()
    assert e.decision == decide(wl, pods, previous=None)
    assert e.decision.spec.status == "completed"


def _port(value: str) -> dict[str, Any]:
    return {"annotations": {"ring-controller/port": value}}


@pytest.mark.parametrize(
    ("pod_kw", "state", "detail"),
    [
        pytest.param(None, "missing", "no pod for this slot", id="no-pod"),
        pytest.param({"phase": "Pending", "ip": ""}, "not_running", "phase Pending", id="pending"),
        pytest.param({"phase": "Running", "ip": ""}, "no_ip", "no pod IP", id="running-without-ip"),
        pytest.param(_port("http"), "invalid_port", "pod j-worker-1: ", id="bad-port"),
        pytest.param(_port("70000"), "invalid_port", "70000", id="port-out-of-range"),
        pytest.param({"annotations": {"ring-controller/slots": "many"}}, "invalid_slots", "many", id="bad-slots"),
    ],
)
def test_the_broken_member_says_why_and_the_others_count(
    pod_kw: dict[str, Any] | None, state: str, detail: str
) -> None:
    raw, wl = _job()
    pods = [_pod(raw, 0)] + ([] if pod_kw is None else [_pod(raw, 1, **pod_kw)])
    e = explain(wl, pods, previous=None)
    assert e.slots[0].state == "counting"
    waiting = e.waiting
    assert [(s.rank, s.index, s.state) for s in waiting] == [(1, 1, state)]
    assert detail in waiting[0].detail
    assert (waiting[0].pod is None) == (pod_kw is None)
    assert e.decision.spec.status == "initializing"
    # The problems are decide()'s own, reported once, with the same message the slot shows.
    assert e.decision.problems == decide(wl, pods, previous=None).problems
    if state.startswith("invalid"):
        assert [p.message for p in e.decision.problems] == [waiting[0].detail]


def test_a_terminating_pod_with_no_replacement_is_deleting() -> None:
    raw, wl = _job(1)
    e = explain(wl, [replace(_pod(raw, 0), deleting=True)], previous=None)
    assert [(s.state, s.detail) for s in e.slots] == [("deleting", "being deleted")]


@pytest.mark.parametrize(
    ("devices", "state", "reason"),
    [
        pytest.param(None, "awaiting_devices", None, id="not-annotated-yet"),
        pytest.param("{not json", "invalid_devices", "device_json", id="not-json"),
        pytest.param(
            json.dumps({"server_id": "10.0.0.1", "devices": [{"device_id": "0", "device_ip": "999.1.1.1"}]}),
            "invalid_devices",
            "device_ip",
            id="bad-device-ip",
        ),
        pytest.param(json.dumps(GOOD_DEVICES), "counting", None, id="good"),
    ],
)
def test_device_annotations(devices: str | None, state: str, reason: str | None) -> None:
    raw, wl = _job(1, template=pod_template(runtime="ascend-910", npus=1))
    e = explain(wl, [_pod(raw, 0, devices=devices)], previous=None)
    assert [s.state for s in e.slots] == [state]
    assert [p.reason for p in e.decision.problems] == ([reason] if reason else [])
    if reason:
        assert "invalid device annotation" in e.slots[0].detail
    if state == "awaiting_devices":
        assert "device plugin" in e.slots[0].detail


def test_pods_that_fill_no_slot_are_listed_with_why() -> None:
    raw, wl = _job(1)
    current = _pod(raw, 0)
    old = _pod(raw, 0, version=3, uid="old", name_suffix="-old")
    stranger = replace(_pod(raw, 0, uid="s", name_suffix="-s"), owner_uid="earlier-uid")
    beyond = _pod(raw, 5, uid="b")
    e = explain(wl, [current, old, stranger, beyond], previous=None)
    assert [s.pod.name if s.pod else None for s in e.slots] == ["j-worker-0"]
    why = {i.pod.name: i.reason for i in e.ignored}
    assert "job version 3" in why["j-worker-0-old"]
    assert "earlier workload" in why["j-worker-0-s"]
    assert "beyond" in why["j-worker-5"]
    assert len(why) == 3


def test_a_replaced_pod_overlapping_its_successor_is_ignored_not_waiting() -> None:
    raw, wl = _job(1)
    old = replace(_pod(raw, 0, uid="old"), deleting=True)
    new = _pod(raw, 0, uid="new", ip="127.1.0.9")
    e = explain(wl, [old, new], previous=None)
    assert [(s.state, s.pod.uid if s.pod else "") for s in e.slots] == [("counting", "new")]
    assert [i.pod.uid for i in e.ignored] == ["old"]


def test_deployment_slots_without_pods_are_missing() -> None:
    raw = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns", "uid": "d-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {"replicas": 2, "template": pod_template()},
    }
    wl = deployment_record(raw, label_key=LABEL)
    e = explain(wl, [], previous=None)
    assert [s.state for s in e.slots] == ["missing", "missing"]


PLACEHOLDER_IP = json.dumps({"server_id": "10.0.0.1", "devices": [{"device_id": "3", "device_ip": "-1"}]})


@pytest.mark.parametrize(
    ("pod_kw", "version", "state", "ids", "cell"),
    [
        pytest.param({"devices": json.dumps(GOOD_DEVICES)}, "1.0", "counting", ["0"], "0", id="counting"),
        pytest.param({"devices": PLACEHOLDER_IP}, "1.0", "invalid_devices", ["3"], "3", id="unfit-for-the-table"),
        pytest.param({"devices": "{not json"}, "1.0", "invalid_devices", None, "invalid", id="malformed"),
        pytest.param({"devices": None}, "1.0", "awaiting_devices", None, "-", id="none-yet"),
        pytest.param(
            {"devices": json.dumps(GOOD_DEVICES), "phase": "Pending", "ip": ""},
            "1.0",
            "not_running",
            ["0"],
            "0",
            id="not-running-still-parsed",
        ),
    ],
)
def test_the_slot_carries_the_devices_explain_parsed(
    pod_kw: dict[str, Any], version: str, state: str, ids: list[str] | None, cell: str
) -> None:
    raw, wl = _job(1, template=pod_template(runtime="ascend-910", npus=1))
    (slot,) = explain(wl, [_pod(raw, 0, **pod_kw)], previous=None, hccl_version=version).slots
    assert slot.state == state
    assert ([d.device_id for d in slot.devices.devices] if slot.devices else None) == ids
    assert render._devices(slot) == cell  # the DEVICES column reads the slot, it does not parse again


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "by-creation"])
def test_pods_of_another_version_or_incarnation_are_ignored_by_one_rule(indexed: bool) -> None:
    raw, wl = _job(1)
    wl = replace(wl, indexed=indexed)
    current = _pod(raw, 0)
    old = replace(_pod(raw, 0, version=3, uid="old", name_suffix="-old"), created="2000-01-01T00:00:00Z")
    stranger = replace(_pod(raw, 0, uid="s", name_suffix="-s"), owner_uid="earlier-uid", created="2000-01-01T00:00:01Z")
    e = explain(wl, [current, old, stranger], previous=None)
    assert [s.pod.name if s.pod else None for s in e.slots] == ["j-worker-0"]  # older pods would rank first
    assert {i.pod.name: i.reason for i in e.ignored} == {
        "j-worker-0-old": f"job version 3; the workload is at version {wl.version}",
        "j-worker-0-s": "owned by an earlier workload of this name (uid earlier-uid, the workload is job-uid)",
    }
