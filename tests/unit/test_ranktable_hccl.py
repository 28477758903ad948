"""HCCL rank tables: exact v1/v2 layouts, initializing tables, and the reader's checks."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from ranktable.clusterspec import STATUS_INITIALIZING, SpecError
from ranktable.hccl import hccl_version, read_hccl, render_hccl
from tests.support.specs import make_spec

TWO_BY_TWO = make_spec([("worker", 2)], devices=2)


def test_v2_two_pods_two_devices_counts_rank_ids_0_to_3() -> None:
    table = json.loads(render_hccl(TWO_BY_TWO, version="v2"))
    assert table == {
        "status": "completed",
        "version": "1.0",
        "server_count": "2",
        "server_list": [
            {
                "server_id": "192.168.0.10",
                "device": [
                    {"device_id": "0", "device_ip": "192.168.100.1", "rank_id": "0"},
                    {"device_id": "1", "device_ip": "192.168.101.1", "rank_id": "1"},
                ],
            },
            {
                "server_id": "192.168.0.11",
                "device": [
                    {"device_id": "0", "device_ip": "192.168.100.2", "rank_id": "2"},
                    {"device_id": "1", "device_ip": "192.168.101.2", "rank_id": "3"},
                ],
            },
        ],
    }


def test_v2_is_the_default_and_rendering_is_deterministic() -> None:
    assert render_hccl(TWO_BY_TWO) == render_hccl(TWO_BY_TWO, version="v2")
    assert render_hccl(TWO_BY_TWO) == render_hccl(make_spec([("worker", 2)], devices=2))


def test_v1_two_pods_two_devices() -> None:
    table = json.loads(render_hccl(TWO_BY_TWO, version="v1"))
    assert table == {
        "status": "completed",
        "group_count": "1",
        "group_list": [
            {
                "group_name": "worker",
                "device_count": "4",
                "instance_count": "2",
                "instance_list": [
                    {
                        "pod_name": "job-worker-0",
                        "server_id": "192.168.0.10",
                        "devices": [
                            {"device_id": "0", "device_ip": "192.168.100.1"},
                            {"device_id": "1", "device_ip": "192.168.101.1"},
                        ],
                    },
                    {
                        "pod_name": "job-worker-1",
                        "server_id": "192.168.0.11",
                        "devices": [
                            {"device_id": "0", "device_ip": "192.168.100.2"},
                            {"device_id": "1", "device_ip": "192.168.101.2"},
                        ],
                    },
                ],
            }
        ],
    }


def test_v1_one_group_per_task_in_rank_order() -> None:
    spec = make_spec([("scheduler", 1), ("worker", 2)], devices=1)
    groups = json.loads(render_hccl(spec, version="v1"))["group_list"]
    assert [(g["group_name"], g["instance_count"], g["device_count"]) for g in groups] == [
        ("scheduler", "1", "1"),
        ("worker", "2", "2"),
    ]


def test_v2_rank_ids_stay_dense_with_uneven_device_counts() -> None:
    spec = make_spec([("worker", 2)], devices=2)
    first = dataclasses.replace(spec.members[0], devices=spec.members[0].devices[:1])
    uneven = dataclasses.replace(spec, members=(first, spec.members[1]))
    servers = json.loads(render_hccl(uneven))["server_list"]
    assert [[d["rank_id"] for d in s["device"]] for s in servers] == [["0"], ["1", "2"]]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_status_mirrors_the_spec_and_initializing_lists_known_members(version: str) -> None:
    spec = make_spec([("worker", 3)], status=STATUS_INITIALIZING, devices=2, present={1})
    text = render_hccl(spec, version=version)
    table = read_hccl(text)
    assert table["status"] == "initializing"
    assert hccl_version(table) == version
    if version == "v2":
        entries = table["server_list"]
    else:
        entries = [i for g in table["group_list"] for i in g["instance_list"]]
    assert [e["server_id"] for e in entries] == ["192.168.0.11"]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_initializing_spec_with_no_members_gives_empty_lists(version: str) -> None:
    table = read_hccl(
        render_hccl(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present=set()), version=version)
    )
    assert table.get("server_list", table.get("group_list")) == []


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_completed_spec_without_devices_cannot_make_a_table(version: str) -> None:
    with pytest.raises(SpecError, match="no member has devices"):
        render_hccl(make_spec([("worker", 2)]), version=version)


def test_completed_spec_without_server_id_cannot_make_a_table() -> None:
    spec = make_spec([("worker", 1)], devices=1)
    no_host = dataclasses.replace(spec, members=(dataclasses.replace(spec.members[0], host=""),))
    with pytest.raises(SpecError, match="no server id"):
        render_hccl(no_host)


def test_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown rank table version 'v3'"):
        render_hccl(TWO_BY_TWO, version="v3")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"status":"initializing"}', id="placeholder"),
        pytest.param(
            '{"status":"initializing","server_list":null,"server_count":"0","version":"1.0"}',
            id="hccl-controller-initial-v2",
        ),
        pytest.param(
            '{"status":"initializing","group_count":"1","group_list":[{"group_name":"w","device_count":"8","instance_count":"1","instance_list":null}]}',
            id="hccl-controller-initial-v1",
        ),
    ],
)
def test_reader_accepts_hccl_controller_initial_tables(text: str) -> None:
    assert read_hccl(text)["status"] == "initializing"


def _v2(mutate: Any) -> str:
    table = json.loads(render_hccl(TWO_BY_TWO, version="v2"))
    mutate(table)
    return json.dumps(table)


def _v1(mutate: Any) -> str:
    table = json.loads(render_hccl(TWO_BY_TWO, version="v1"))
    mutate(table)
    return json.dumps(table)


def _set(path: list[Any], value: Any) -> Any:
    def mutate(table: Any) -> None:
        node = table
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value

    return mutate


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("{", "not valid JSON", id="not-json"),
        pytest.param('"completed"', "expected a JSON object", id="not-object"),
        pytest.param('{"status":"done"}', "status: 'done'", id="bad-status"),
        pytest.param('{"status":"completed"}', "needs server_list (v2) or group_list (v1)", id="completed-placeholder"),
        pytest.param(_v2(_set(["server_count"], 2)), "server_count: 2 is not a string-typed", id="v2-count-is-int"),
        pytest.param(
            _v2(_set(["server_count"], "3")), "server_count: 3 but server_list holds 2", id="v2-count-mismatch"
        ),
        pytest.param(
            _v2(_set(["server_list", 0, "server_id"], "host-a")), "server_list[0].server_id", id="v2-server-id"
        ),
        pytest.param(
            _v2(_set(["server_list", 1, "device", 0, "rank_id"], "1")), "rank_id appears twice", id="v2-duplicate-rank"
        ),
        pytest.param(_v2(_set(["server_list", 1, "device", 1, "rank_id"], "7")), "must be 0..3", id="v2-rank-gap"),
        pytest.param(
            _v2(_set(["server_list", 0, "device", 0, "device_ip"], "x")), "device[0].device_ip", id="v2-device-ip"
        ),
        pytest.param(_v2(_set(["server_list", 0, "device"], [])), "empty in a completed table", id="v2-empty-server"),
        pytest.param(_v2(_set(["version"], 1.0)), "version: expected a non-empty string", id="v2-version-number"),
        pytest.param(_v1(_set(["group_count"], "2")), "group_count: 2 but group_list holds 1", id="v1-count-mismatch"),
        pytest.param(
            _v1(_set(["group_list", 0, "instance_count"], "3")),
            "instance_count: 3 but instance_list holds 2",
            id="v1-instances",
        ),
        pytest.param(
            _v1(_set(["group_list", 0, "device_count"], "8")),
            "device_count: 8 but its instances hold 4",
            id="v1-devices",
        ),
        pytest.param(
            _v1(_set(["group_list", 0, "instance_list", 0, "devices", 0, "device_id"], "x")),
            "device_id: 'x'",
            id="v1-device-id",
        ),
        pytest.param(
            _v1(_set(["group_list", 0, "instance_list", 0, "pod_name"], None)),
            "pod_name: expected a string",
            id="v1-pod-name",
        ),
    ],
)
def test_reader_rejects(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        read_hccl(text)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_reader_accepts_what_the_writer_writes(version: str) -> None:
    text = render_hccl(make_spec([("chief", 1), ("worker", 3)], devices=8), version=version)
    assert read_hccl(text) == json.loads(text)
