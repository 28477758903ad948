"""cluster.json: canonical rendering, round trips, and every rejection rule of the parser."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from ranktable import frozen
from ranktable.clusterspec import (
    STATUS_COMPLETED,
    STATUS_INITIALIZING,
    ClusterSpec,
    Device,
    PodNotInSpec,
    SpecError,
    member_for_pod,
    role_for_task,
    spec_from_json,
    spec_to_dict,
    spec_to_json,
)
from ranktable.frozen import replace as replace_record
from tests.support.specs import JOB, big_spec, make_member, make_spec, spec_dict


def test_golden_text_has_the_contract_keys_and_int_types() -> None:
    spec = ClusterSpec(
        status=STATUS_COMPLETED,
        job=JOB,
        epoch=3,
        expected=1,
        members=(make_member(0, "worker", 0, devices=1),),
    )
    assert spec_to_json(spec) == (
        '{"epoch":3,"expected":1,"job":{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","name":"job",'
        '"namespace":"default","uid":"job-uid","version":0},"members":[{"devices":[{"id":"0",'
        '"ip":"192.168.100.1"}],"host":"192.168.0.10","index":0,"ip":"127.1.0.1","node":"node-0",'
        '"pod":"job-worker-0","port":2222,"rank":0,"role":"worker","task":"worker","uid":"uid-job-worker-0"}],'
        '"status":"completed"}'
    )


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(make_spec([("worker", 3)]), id="workers"),
        pytest.param(make_spec([("chief", 1), ("worker", 2), ("ps", 1)], devices=2), id="mixed-with-devices"),
        pytest.param(
            make_spec([("worker", 4)], status=STATUS_INITIALIZING, present={0, 2}), id="initializing-with-gaps"
        ),
        pytest.param(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present=set()), id="initializing-empty"),
    ],
)
def test_round_trip_is_identity(spec: ClusterSpec) -> None:
    text = spec_to_json(spec)
    assert spec_from_json(text) == spec
    assert spec_to_json(spec_from_json(text)) == text


def test_equal_specs_render_equal_text_whatever_the_input_key_order() -> None:
    text = spec_to_json(make_spec([("chief", 1), ("worker", 2)]))
    shuffled = json.dumps(dict(reversed(list(json.loads(text).items()))), indent=2)
    assert shuffled != text
    assert spec_to_json(spec_from_json(shuffled)) == text


def test_unknown_keys_are_ignored_and_optional_member_keys_default() -> None:
    obj = spec_dict(future_key={"x": 1})
    for member in obj["members"]:
        del member["host"]
        del member["devices"]
        member["extra"] = True
    spec = spec_from_json(json.dumps(obj))
    assert [m.host for m in spec.members] == ["", ""]
    assert [m.devices for m in spec.members] == [(), ()]


@pytest.mark.parametrize(
    ("task", "role"),
    [
        ("chief", "chief"),
        ("worker", "worker"),
        ("ps", "ps"),
        ("evaluator", "evaluator"),
        ("trainer", "worker"),
        ("master", "worker"),
        ("Chief", "worker"),
    ],
)
def test_role_for_task(task: str, role: str) -> None:
    assert role_for_task(task) == role


def test_member_for_pod_names_the_pods_it_has() -> None:
    spec = make_spec([("worker", 2)], epoch=7)
    assert member_for_pod(spec, "job-worker-1").rank == 1
    with pytest.raises(PodNotInSpec, match=re.escape("(epoch 7), which lists: job-worker-0, job-worker-1")) as caught:
        member_for_pod(spec, "job-worker-9")
    assert caught.value.pods == ("job-worker-0", "job-worker-1")


def _with_member(position: int, **changes: Any) -> dict[str, Any]:
    obj = spec_dict()
    obj["members"][position].update(changes)
    return obj


MALFORMED: list[Any] = [
    pytest.param("{", "not valid JSON", id="not-json"),
    pytest.param("[]", "expected a JSON object, got a list", id="not-an-object"),
    pytest.param(spec_dict(status="done"), "status: 'done'", id="unknown-status"),
    pytest.param({k: v for k, v in spec_dict().items() if k != "job"}, "job: missing", id="job-missing"),
    pytest.param(
        spec_dict(job={**spec_dict()["job"], "version": "1"}),
        "job.version: expected an integer",
        id="job-version-string",
    ),
    pytest.param(spec_dict(job={**spec_dict()["job"], "name": ""}), "job.name: must not be empty", id="job-name-empty"),
    pytest.param(spec_dict(epoch=True), "epoch: expected an integer, got a boolean", id="epoch-bool"),
    pytest.param(spec_dict(epoch=-1), "epoch: -1 is not a non-negative integer", id="epoch-negative"),
    pytest.param(spec_dict(expected=2.0), "expected: expected an integer, got a number", id="expected-float"),
    pytest.param(spec_dict(members={}), "members: expected a list", id="members-not-a-list"),
    pytest.param(spec_dict(members=[1]), "members[0]: expected a JSON object", id="member-not-an-object"),
    pytest.param(_with_member(0, rank="0"), "members[0].rank: expected an integer, got a string", id="rank-string"),
    pytest.param(_with_member(1, rank=0), "members[1].rank: 0 after rank 0", id="rank-duplicate"),
    pytest.param(
        spec_dict(members=list(reversed(spec_dict()["members"]))),
        "members[1].rank: 0 after rank 1",
        id="ranks-out-of-order",
    ),
    pytest.param(
        spec_dict(expected=1, status="initializing"),
        "members[1].rank: 1 is not below expected (1)",
        id="rank-not-below-expected",
    ),
    pytest.param(_with_member(0, port=0), "members[0].port: 0 is not a port number", id="port-zero"),
    pytest.param(_with_member(0, port=65536), "members[0].port: 65536", id="port-too-big"),
    pytest.param(_with_member(0, port="2222"), "members[0].port: expected an integer", id="port-string"),
    pytest.param(_with_member(0, ip="10.0.0.300"), "members[0].ip: '10.0.0.300' is not an IP address", id="ip-invalid"),
    pytest.param(_with_member(0, ip="job-worker-0.svc"), "members[0].ip", id="ip-is-a-hostname"),
    pytest.param(_with_member(0, host="node a"), "members[0].host: 'node a' is not a server id", id="host-invalid"),
    pytest.param(
        _with_member(1, pod="job-worker-0"), "members[1].pod: 'job-worker-0' appears twice", id="pod-duplicate"
    ),
    pytest.param(_with_member(1, index=0), "task 'worker' index 0 appears twice", id="task-index-duplicate"),
    pytest.param(_with_member(0, pod=""), "members[0].pod: must not be empty", id="pod-empty"),
    pytest.param(_with_member(0, uid=None), "members[0].uid: expected a string, got null", id="uid-null"),
    pytest.param(
        spec_dict(members=spec_dict()["members"][:1]), "completed but members holds 1 of 2", id="completed-short"
    ),
    pytest.param(
        _with_member(0, devices=[{"id": "-1", "ip": "192.168.100.1"}]),
        "members[0].devices[0].id: '-1'",
        id="device-id-negative",
    ),
    pytest.param(
        _with_member(0, devices=[{"id": 0, "ip": "192.168.100.1"}]),
        "members[0].devices[0].id: expected a string, got an integer",
        id="device-id-int",
    ),
    pytest.param(
        _with_member(0, devices=[{"id": "0", "ip": "x"}]),
        "members[0].devices[0].ip: 'x' is not an IP address",
        id="device-ip-invalid",
    ),
    pytest.param(
        _with_member(
            0,
            devices=[
                {"id": "0", "ip": "192.168.100.1"},
                {"id": "1", "ip": "192.168.100.1"},
            ],
        ),
        "members[0].devices[1].ip: '192.168.100.1' appears twice",
        id="device-ip-duplicate",
    ),
]


@pytest.mark.parametrize(("document", "message"), MALFORMED)
def test_malformed_spec_is_rejected_with_a_precise_message(document: Any, message: str) -> None:
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(SpecError, match=re.escape(message)):
        spec_from_json(text)


def test_writer_refuses_what_the_reader_would_reject() -> None:
    good = make_spec([("worker", 2)])
    short = ClusterSpec(status=STATUS_COMPLETED, job=JOB, epoch=1, expected=3, members=good.members)
    with pytest.raises(SpecError, match="completed but members holds 2 of 3"):
        spec_to_json(short)
    swapped = ClusterSpec(status=STATUS_COMPLETED, job=JOB, epoch=1, expected=2, members=tuple(reversed(good.members)))
    with pytest.raises(SpecError, match="ordered by unique ranks"):
        spec_to_json(swapped)


def test_ipv6_member_address_is_bracketed() -> None:
    member = make_member(0, "worker", 0)
    v6 = frozen.replace(member, ip="fd00::1")
    assert v6.address == "[fd00::1]:2222"
    assert member.address == "127.1.0.1:2222"


def test_rank_table_only_fields_stay_out_of_cluster_json_and_comparisons() -> None:
    spec = make_spec([("worker", 2)], devices=2)
    first = spec.members[0]
    ascend = frozen.replace(
        first,
        host="uid-1",
        host_ip="192.168.0.10",
        super_pod="3",
        hardware="800I-A3-64G",
        devices=(
            Device(device_id="0", device_ip="-1", super_device_id="37748736"),
            Device(device_id="1", device_ip="-1", super_device_id="37748737"),
        ),
    )
    changed = frozen.replace(spec, members=(ascend, spec.members[1]))
    text = spec_to_json(changed)
    assert all(word not in text for word in ("host_ip", "super_pod", "hardware", "37748736"))
    back = spec_from_json(text)
    assert back == changed  # equal: those fields take no part in comparisons
    assert back.members[0].host == "uid-1" and back.members[0].host_ip == ""
    assert back.members[0].devices[0].has_ip is False  # a placeholder, twice in one member
    plain = frozen.replace(changed, members=(frozen.replace(ascend, host_ip="", hardware=""), spec.members[1]))
    assert spec_to_json(plain) == text


def test_the_ipv4_fast_path_accepts_exactly_what_ipaddress_accepts() -> None:
    import ipaddress
    import random

    from ranktable.clusterspec import _IPV4

    rng = random.Random(25)
    octets = ["0", "7", "09", "10", "99", "100", "199", "249", "255", "256", "300", "", "00", "1٣"]
    for _ in range(20000):
        text = ".".join(rng.choice(octets) for _ in range(rng.choice([3, 4, 4, 4, 5])))
        try:
            ipaddress.IPv4Address(text)
            valid = True
        except ValueError:
            valid = False
        assert bool(_IPV4.fullmatch(text)) is valid, text


def test_parsing_pauses_the_garbage_collector_and_restores_it() -> None:
    import gc

    from ranktable.clusterspec import load_json

    assert load_json('{"a": [1, 2]}') == {"a": [1, 2]} and gc.isenabled()
    with pytest.raises(ValueError, match="Expecting property name"):
        load_json("{")
    assert gc.isenabled()
    gc.disable()
    try:
        load_json("[]")
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("members", [1, 499, 500, 501, 1001])
@pytest.mark.parametrize("topology", [False, True])
def test_the_text_encoded_a_chunk_of_members_at_a_time_is_the_whole_objects_canonical_json(
    members: int, topology: bool
) -> None:
    spec = big_spec(members, devices=1)
    if topology:
        spec = replace_record(
            spec,
            rank_order="topology",
            topology_keys=("rack", "kubernetes.io/hostname"),
            members=tuple(replace_record(m, topology=(f"r{m.rank % 3}", m.node)) for m in spec.members),
        )
    whole = json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert spec_to_json(spec) == whole
    assert spec_from_json(whole) == spec
