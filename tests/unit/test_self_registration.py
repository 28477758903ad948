"""Self-registration on plain records: who counts, at which address, and what does not change."""

from __future__ import annotations

from typing import Any

import pytest

from agent.decide import decide, explain, registering
from model.keys import REGISTERED_ANNOTATION, SELF_REGISTER_ANNOTATION
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.volcano import workload_record
from ranktable.registration import Registration, parse_registration, registration_value
from tests.support.factories import volcano_job, volcano_pod

LABEL = "ring-controller.atlas"
STARTED = "2026-12-01T23:00:00.000001Z"


def _job(opt: str | None = None) -> tuple[dict[str, Any], WorkloadRecord]:
    raw = volcano_job("j", tasks=[("worker", 2)], uid="job-uid")
    if opt is not None:
        raw["metadata"].setdefault("annotations", {})[SELF_REGISTER_ANNOTATION] = opt
    return raw, workload_record(raw, label_key=LABEL)


def _pod(
    raw: dict[str, Any],
    index: int,
    *,
    phase: str,
    ip: str = "",
    registered: str | None = None,
    host_ip: str = "10.0.0.1",
    node: str = "n1",
) -> PodRecord:
    annotations = {REGISTERED_ANNOTATION: registered} if registered is not None else None
    pod = volcano_pod(
        raw,
        task="worker",
        index=index,
        uid=f"u{index}",
        ip=ip,
        host_ip=host_ip,
        phase=phase,
        node=node,
        annotations=annotations,
    )
    return pod_record(pod)


def _reg(ip: str) -> str:
    return registration_value(ip=ip, started=STARTED)


def test_the_value_round_trips_and_is_compact() -> None:
    value = _reg("10.4.0.7")
    assert value == '{"ip":"10.4.0.7","started":"2026-12-01T23:00:00.000001Z"}'
    assert parse_registration(value) == Registration(ip="10.4.0.7", started=STARTED)
    assert parse_registration(None) is None and parse_registration("") is None
    assert parse_registration(_reg("fd00::7")).ip == "fd00::7"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not JSON"),
        ("[]", "not a JSON object"),
        ('{"started":"x"}', "no string 'ip'"),
        ('{"ip":"10.4.0.300"}', "is not an IP address"),
        ('{"ip":"10.4.0.7","started":5}', "'started' is not a string"),
        ('{"ip":"10.4.0.7","pad":"' + "x" * 300 + '"}', "over 256"),
    ],
    ids=["truncated", "array", "no-ip", "bad-ip", "started-number", "too-long"],
)
def test_malformed_values_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_registration(text)


def test_a_registered_pending_member_counts_only_where_the_job_opts_in() -> None:
    for opt, flag, counts in [(None, False, False), (None, True, True), ("true", False, True), ("false", True, False)]:
        raw, wl = _job(opt)
        pods = [
            _pod(raw, 0, phase="Running", ip="127.1.0.1"),
            _pod(raw, 1, phase="Pending", registered=_reg("127.1.0.2")),
        ]
        assert registering(wl, flag) is counts
        d = decide(wl, pods, previous=None, self_register=flag)
        assert (d.spec.status == "completed") is counts, (opt, flag)
        if counts:
            assert [m.ip for m in d.spec.members] == ["127.1.0.1", "127.1.0.2"]


def test_the_kubelets_later_running_status_with_the_same_ip_writes_nothing_new() -> None:
    raw, wl = _job("true")
    early = decide(
        wl,
        [_pod(raw, 0, phase="Running", ip="127.1.0.1"), _pod(raw, 1, phase="Pending", registered=_reg("127.1.0.2"))],
        previous=None,
    )
    assert early.spec.status == "completed" and early.spec.epoch == 1
    later = decide(
        wl,
        [
            _pod(raw, 0, phase="Running", ip="127.1.0.1"),
            _pod(raw, 1, phase="Running", ip="127.1.0.2", registered=_reg("127.1.0.2")),
        ],
        previous=early.spec,
    )
    assert later.data == early.data and later.spec.epoch == 1


@pytest.mark.parametrize(
    ("pod_kw", "state"),
    [
        ({"phase": "Pending", "ip": "127.1.0.9", "registered": _reg("127.1.0.2")}, "not_running"),
        ({"phase": "Pending", "registered": _reg("127.1.0.2"), "host_ip": ""}, "not_running"),
        ({"phase": "Failed", "registered": _reg("127.1.0.2")}, "not_running"),
        ({"phase": "Pending", "registered": "{"}, "not_running"),
        ({"phase": "Pending"}, "not_running"),
    ],
    ids=["status-ip-differs", "no-host-ip-yet", "failed", "malformed", "not-registered"],
)
def test_a_registration_that_cannot_be_trusted_does_not_count(pod_kw: dict[str, Any], state: str) -> None:
    raw, wl = _job("true")
    pods = [_pod(raw, 0, phase="Running", ip="127.1.0.1"), _pod(raw, 1, **pod_kw)]
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "initializing"
    assert [s.state for s in explain(wl, pods, previous=None).slots] == ["counting", state]


def test_a_malformed_registration_is_a_problem_only_where_registrations_count() -> None:
    raw, wl = _job()
    pods = [_pod(raw, 0, phase="Running", ip="127.1.0.1"), _pod(raw, 1, phase="Pending", registered='{"ip":"x"}')]
    assert decide(wl, pods, previous=None).problems == ()
    problems = decide(wl, pods, previous=None, self_register=True).problems
    assert [p.reason for p in problems] == ["invalid_registration"]
    assert "pod j-worker-1: registration ip 'x' is not an IP address" in problems[0].message


def test_a_deleted_pods_registration_does_not_count() -> None:
    raw, wl = _job("true")
    pod = volcano_pod(raw, task="worker", index=1, uid="u1", host_ip="10.0.0.1", phase="Pending", node="n1")
    pod["metadata"]["annotations"][REGISTERED_ANNOTATION] = _reg("127.1.0.2")
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T23:00:00Z"
    d = decide(wl, [_pod(raw, 0, phase="Running", ip="127.1.0.1"), pod_record(pod)], previous=None)
    assert d.spec.status == "initializing"
