"""HCCL rank tables: exact v1/v2 layouts, initializing tables, and the reader's checks."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from ranktable import frozen
from ranktable.clusterspec import STATUS_INITIALIZING, ClusterSpec, Device, SpecError
from ranktable.devices import REASONS
from ranktable.hccl import device_problem, hccl_version, read_hccl, render_hccl
from ranktable.hccl_table20 import check_scale_out
from ranktable.levels import parse_levels
from tests.support.specs import make_member, make_spec

TWO_BY_TWO = make_spec([("worker", 2)], devices=2)
ALL_VERSIONS = ["v1", "v2", "1.0", "1.2", "2.0"]


def with_super_devices(spec: ClusterSpec, *, super_pods: tuple[str, ...] = ("0",)) -> ClusterSpec:
    """``spec`` with super device ids ``37748736 + 8 * rank + device`` and members spread over ``super_pods``."""
    members = []
    for m in spec.members:
        devices = tuple(
            frozen.replace(d, super_device_id=str(37748736 + 8 * m.rank + int(d.device_id))) for d in m.devices
        )
        members.append(frozen.replace(m, devices=devices, super_pod=super_pods[m.rank % len(super_pods)]))
    return frozen.replace(spec, members=tuple(members))


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


def test_1_0_is_the_default_and_rendering_is_deterministic() -> None:
    assert render_hccl(TWO_BY_TWO) == render_hccl(TWO_BY_TWO, version="1.0")
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
    first = frozen.replace(spec.members[0], devices=spec.members[0].devices[:1])
    uneven = frozen.replace(spec, members=(first, spec.members[1]))
    servers = json.loads(render_hccl(uneven))["server_list"]
    assert [[d["rank_id"] for d in s["device"]] for s in servers] == [["0"], ["1", "2"]]


@pytest.mark.parametrize(
    ("version", "own"), [("v1", "v1"), ("v2", "1.0"), ("1.0", "1.0"), ("1.2", "1.2"), ("2.0", "2.0")]
)
def test_status_mirrors_the_spec_and_initializing_lists_known_members(version: str, own: str) -> None:
    spec = with_super_devices(make_spec([("worker", 3)], status=STATUS_INITIALIZING, devices=2, present={1}))
    text = render_hccl(spec, version=version)
    table = read_hccl(text)
    assert table["status"] == "initializing"
    assert hccl_version(table) == own
    if version == "v1":
        entries = [i["server_id"] for g in table["group_list"] for i in g["instance_list"]]
    elif version == "2.0":
        entries = [str(r["rank_id"]) for r in table["rank_list"]]
    else:
        entries = [s["server_id"] for s in table["server_list"]]
    assert entries == (["0", "1"] if version == "2.0" else ["192.168.0.11"])


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_initializing_spec_with_no_members_gives_empty_lists(version: str) -> None:
    table = read_hccl(
        render_hccl(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present=set()), version=version)
    )
    assert table.get("server_list", table.get("group_list", table.get("rank_list"))) == []


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_completed_spec_without_devices_cannot_make_a_table(version: str) -> None:
    with pytest.raises(SpecError, match="no member has devices"):
        render_hccl(make_spec([("worker", 2)]), version=version)


def test_completed_spec_without_server_id_cannot_make_a_table() -> None:
    spec = make_spec([("worker", 1)], devices=1)
    no_host = frozen.replace(spec, members=(frozen.replace(spec.members[0], host=""),))
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
        pytest.param(
            '{"status":"completed"}', "needs server_list, rank_list or group_list", id="completed-placeholder"
        ),
        pytest.param(_v2(_set(["server_count"], 2)), "server_count: 2 is not a string-typed", id="v2-count-is-int"),
        pytest.param(
            _v2(_set(["server_count"], "3")), "server_count: 3 but server_list holds 2", id="v2-count-mismatch"
        ),
        pytest.param(
            _v2(_set(["server_list", 0, "server_id"], "host a")), "server_list[0].server_id", id="v2-server-id"
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
    with pytest.raises(SpecError, match=re.escape(fragment)):
        read_hccl(text)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_reader_accepts_what_the_writer_writes(version: str) -> None:
    text = render_hccl(with_super_devices(make_spec([("chief", 1), ("worker", 3)], devices=8)), version=version)
    assert read_hccl(text) == json.loads(text)


# ascend-operator's tables (shapes from its hccl.json description and its tests) ---------------------


def ascend_member(rank: int, *, devices: int = 2, super_pod: str = "", hardware: str = "", ip_ok: bool = True) -> Any:
    """Member ``rank`` as the current device plugin describes it: server id = pod uid."""
    base = make_member(rank, "worker", rank, devices=devices)
    return frozen.replace(
        base,
        host=f"uid-{rank}",
        host_ip=f"192.168.0.{10 + rank}",
        super_pod=super_pod,
        hardware=hardware,
        devices=tuple(
            Device(
                device_id=str(d),
                device_ip=f"192.168.{101 + d}.{rank + 1}" if ip_ok else "-1",
                super_device_id=str(37748736 + 8 * rank + d),
            )
            for d in range(devices)
        ),
    )


def ascend_spec(*members: Any) -> ClusterSpec:
    return frozen.replace(make_spec([("worker", len(members))]), members=tuple(members))


def test_1_0_as_ascend_operator_writes_it() -> None:
    text = render_hccl(ascend_spec(ascend_member(0, hardware="800I-A2-32G")), version="1.0")
    table = json.loads(text)
    assert table == {
        "status": "completed",
        "server_list": [
            {
                "device": [
                    {"device_id": "0", "device_ip": "192.168.101.1", "rank_id": "0"},
                    {"device_id": "1", "device_ip": "192.168.102.1", "rank_id": "1"},
                ],
                "server_id": "192.168.0.10",  # one pod on its node: the node's IP (onePodOneNode)
                "host_ip": "192.168.0.10",
                "container_ip": "127.1.0.1",
                "hardware_type": "800I-A2-32G",
            }
        ],
        "server_count": "1",
        "version": "1.0",
    }
    # ascend-operator's key order (its Go structs), so the texts compare too.
    assert list(table) == ["status", "server_list", "server_count", "version"]
    assert list(table["server_list"][0]) == ["device", "hardware_type", "server_id", "host_ip", "container_ip"]
    assert read_hccl(text) == table


@pytest.mark.parametrize(
    ("nodes", "server_ids"),
    [
        pytest.param(["n0", "n1", "n2"], ["192.168.0.10", "192.168.0.11", "192.168.0.12"], id="one-pod-one-node"),
        pytest.param(["n0", "n0", "n1"], ["uid-0", "uid-1", "uid-2"], id="two-pods-share-a-node"),
        pytest.param(["n0", "", "n1"], ["uid-0", "uid-1", "uid-2"], id="a-node-unknown"),
    ],
)
@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_server_ids_follow_ascend_operators_one_pod_one_node_rule(
    nodes: list[str], server_ids: list[str], version: str
) -> None:
    members = [frozen.replace(ascend_member(i, super_pod="0"), node=n) for i, n in enumerate(nodes)]
    table = json.loads(render_hccl(ascend_spec(*members), version=version))
    assert [s["server_id"] for s in table["server_list"]] == server_ids
    if version == "1.2":
        assert [s["server_id"] for s in table["super_pod_list"][0]["server_list"]] == server_ids


def test_1_0_leaves_hardware_type_out_when_unknown() -> None:
    server = json.loads(render_hccl(ascend_spec(ascend_member(0)), version="1.0"))["server_list"][0]
    assert "hardware_type" not in server


def test_1_2_two_servers_one_super_pod_as_documented() -> None:
    spec = ascend_spec(ascend_member(0, super_pod="0"), ascend_member(1, super_pod="0"))
    table = json.loads(render_hccl(spec, version="1.2"))
    assert table["version"] == "1.2"
    assert list(table) == ["status", "server_list", "server_count", "version", "super_pod_list"]
    assert table["server_list"][1]["device"] == [
        {"device_id": "0", "device_ip": "192.168.101.2", "super_device_id": "37748744", "rank_id": "2"},
        {"device_id": "1", "device_ip": "192.168.102.2", "super_device_id": "37748745", "rank_id": "3"},
    ]
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "uid-0"}, {"server_id": "uid-1"}]}
    ]


def test_1_2_two_nodes_in_two_super_pods() -> None:
    spec = ascend_spec(ascend_member(0, super_pod="1"), ascend_member(1, super_pod="0"))
    table = read_hccl(render_hccl(spec, version="1.2"))
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "uid-1"}]},
        {"super_pod_id": "1", "server_list": [{"server_id": "uid-0"}]},
    ]


def test_1_2_placeholder_ips_pass_within_one_super_pod_only() -> None:
    one = ascend_spec(ascend_member(0, super_pod="0", ip_ok=False), ascend_member(1, super_pod="0", ip_ok=False))
    table = read_hccl(render_hccl(one, version="1.2"))
    assert {d["device_ip"] for s in table["server_list"] for d in s["device"]} == {"-1"}
    two = ascend_spec(ascend_member(0, super_pod="0", ip_ok=False), ascend_member(1, super_pod="1"))
    with pytest.raises(SpecError, match="device without an IP, and the job spans 2 super pods"):
        render_hccl(two, version="1.2")


def test_1_2_needs_super_device_ids_and_super_pods() -> None:
    member = ascend_member(0, super_pod="0")
    no_sdid = frozen.replace(member, devices=tuple(frozen.replace(d, super_device_id="") for d in member.devices))
    with pytest.raises(SpecError, match="have no super_device_id"):
        render_hccl(ascend_spec(no_sdid), version="1.2")
    with pytest.raises(SpecError, match="has no super pod"):
        render_hccl(ascend_spec(ascend_member(0)), version="1.2")


# The levelList of ascend-operator's v2.0 test fixture: one device, four levels.
FIXTURE_LEVELS = parse_levels(
    [
        {"level": 0, "info": {"UB": {"net_layer": 0, "net_instance_id": "L0"}}},
        {"level": 1, "info": {"UB": {"net_layer": 1, "net_instance_id": "L1"}}},
        {"level": 2, "info": {"UBOE": {"net_layer": 2, "net_instance_id": "L2-UBOE"}}},
        {"level": 3, "info": {"ROCE": {"net_layer": 3, "net_instance_id": "L3-ROCE"}}},
    ]
)


def level_spec(levels: Any, devices: int = 1) -> ClusterSpec:
    member = ascend_member(0, devices=devices)
    return ascend_spec(frozen.replace(member, devices=tuple(frozen.replace(d, levels=levels) for d in member.devices)))


def _element(layer: int, instance: str, net_type: str = "", addrs: list[Any] | None = None) -> dict[str, Any]:
    return {
        "net_layer": layer,
        "net_instance_id": instance,
        "net_type": net_type,
        "net_attr": "",
        "rank_addr_list": addrs or [],
    }


def test_2_0_as_documented_one_rank() -> None:
    levels = parse_levels(
        [
            {
                "level": 0,
                "info": {
                    "UB": {
                        "net_layer": 0,
                        "net_instance_id": "sp-1",
                        "net_type": "TOPO_FILE_DESC",
                        "net_attr": "",
                        "rank_addr_list": [{"addr_type": "EID", "addr": "e0", "ports": ["0/1"], "plane_id": "1"}],
                    }
                },
            }
        ]
    )
    text = render_hccl(level_spec(levels), version="2.0")
    table = json.loads(text)
    assert table == {
        "status": "completed",
        "version": "2.0",
        "rank_count": 1,
        "rank_list": [
            {
                "rank_id": 0,
                "local_id": 0,
                "device_id": 0,
                "level_list": [
                    _element(
                        0,
                        "sp-1",
                        "TOPO_FILE_DESC",
                        [{"addr_type": "EID", "addr": "e0", "ports": ["0/1"], "plane_id": "1"}],
                    )
                ],
            }
        ],
    }
    assert read_hccl(text) == table


@pytest.mark.parametrize(
    ("scale_out", "expected"),
    [
        pytest.param("", ["L0", "L1", "L3-ROCE"], id="default-prefers-roce"),
        pytest.param("UBOE", ["L0", "L1", "L2-UBOE"], id="label-uboe"),
        pytest.param("ROCE", ["L0", "L1", "L3-ROCE"], id="label-roce"),
    ],
)
def test_2_0_level_list_follows_the_scale_out_type(scale_out: str, expected: list[str]) -> None:
    table = json.loads(render_hccl(level_spec(FIXTURE_LEVELS), version="2.0", scale_out=scale_out))
    assert [e["net_instance_id"] for e in table["rank_list"][0]["level_list"]] == expected


def test_2_0_missing_levels_get_the_default_element_or_none() -> None:
    roce_elsewhere = parse_levels([{"level": 2, "info": {"ROCE": {"net_layer": 2, "net_instance_id": "x"}}}])
    table = json.loads(render_hccl(level_spec(roce_elsewhere), version="2.0"))
    # ROCE is listed (on level 2), so level 3 is wanted; the device has none there: the default element.
    assert table["rank_list"][0]["level_list"] == [_element(3, "CLUSTER1", "CLOS")]
    bare = json.loads(render_hccl(level_spec(()), version="2.0"))
    assert "level_list" not in bare["rank_list"][0]


def test_2_0_ranks_count_devices_across_members() -> None:
    spec = ascend_spec(ascend_member(0, devices=2), ascend_member(1, devices=2))
    ranks = json.loads(render_hccl(spec, version="2.0"))["rank_list"]
    assert [(r["rank_id"], r["device_id"]) for r in ranks] == [(0, 0), (1, 1), (2, 0), (3, 1)]


def test_scale_out_values() -> None:
    assert check_scale_out(" uboe ") == "UBOE"
    assert check_scale_out("") == ""
    with pytest.raises(ValueError, match="'ib' is not one of ROCE, UBOE"):
        check_scale_out("ib")


@pytest.mark.parametrize(
    ("version", "devices", "reason"),
    [
        pytest.param("1.0", (Device("0", "-1"),), "device_ip", id="1.0-placeholder"),
        pytest.param("v2", (Device("0", "-.-.-.-"),), "device_ip", id="v2-placeholder"),
        pytest.param("v1", (Device("0", ""),), "device_ip", id="v1-empty"),
        pytest.param("1.2", (Device("0", "-1", "37748736"),), None, id="1.2-placeholder-ok-here"),
        pytest.param("1.2", (Device("0", "1.1.1.1"),), "super_device_id", id="1.2-no-sdid"),
        pytest.param("2.0", (Device("0", "-1"),), None, id="2.0-needs-no-ip"),
        pytest.param("1.0", (Device("0", "1.1.1.1"),), None, id="1.0-ok"),
    ],
)
def test_device_problem_per_version(version: str, devices: tuple[Device, ...], reason: str | None) -> None:
    problem = device_problem(version, devices)
    assert (problem[0] if problem else None) == reason
    if problem:
        assert problem[0] in REASONS


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"status":"initializing","version":"1.0"}', id="1.0"),
        pytest.param('{"status":"initializing","version":"1.2","super_pod_list":[]}', id="1.2"),
        pytest.param('{"status":"initializing","version":"2.0"}', id="2.0"),
    ],
)
def test_reader_accepts_ascend_operator_initial_tables(text: str) -> None:
    assert read_hccl(text)["status"] == "initializing"


def _t(version: str, mutate: Any, spec: ClusterSpec | None = None) -> str:
    spec = spec or ascend_spec(ascend_member(0, super_pod="0"), ascend_member(1, super_pod="1"))
    table = json.loads(render_hccl(spec, version=version))
    mutate(table)
    return json.dumps(table)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param(_t("1.0", _set(["server_list", 0, "host_ip"], "h")), "server_list[0].host_ip", id="1.0-host-ip"),
        pytest.param(
            _t("1.0", _set(["server_list", 0, "container_ip"], 7)), "container_ip: 7 is not a string", id="1.0-pod-ip"
        ),
        pytest.param(
            _t("1.2", _set(["super_pod_list", 0, "server_list", 0, "server_id"], "uid-9")),
            "servers ['uid-9'] are not in server_list",
            id="1.2-unknown-server",
        ),
        pytest.param(
            _t("1.2", _set(["super_pod_list", 1, "super_pod_id"], "0")), "'0' appears twice", id="1.2-pod-twice"
        ),
        pytest.param(
            _t("1.2", lambda t: t["super_pod_list"].pop()), "every server of server_list", id="1.2-server-unlisted"
        ),
        pytest.param(
            _t("1.2", lambda t: t["server_list"][0]["device"][0].pop("super_device_id")),
            "super_device_id: missing",
            id="1.2-no-sdid",
        ),
        pytest.param(
            _t("1.2", _set(["server_list", 0, "device", 0, "device_ip"], "-1")),
            "device_ip: '-1' is not an IP",
            id="1.2-placeholder-across-pods",
        ),
        pytest.param(_t("2.0", _set(["rank_count"], 3)), "rank_count: 3 but rank_list holds 4", id="2.0-count"),
        pytest.param(_t("2.0", _set(["rank_count"], "4")), "rank_count: '4' is not", id="2.0-count-string"),
        pytest.param(_t("2.0", _set(["rank_list", 0, "rank_id"], "0")), "rank_list[0].rank_id", id="2.0-rank-string"),
        pytest.param(_t("2.0", _set(["rank_list", 1, "rank_id"], 0)), "rank_id appears twice", id="2.0-rank-twice"),
        pytest.param(_t("2.0", _set(["rank_list", 3, "rank_id"], 9)), "must be 0..3", id="2.0-rank-gap"),
        pytest.param(
            _t("2.0", _set(["rank_list", 0, "level_list"], [{"net_layer": 0}])),
            "level_list[0].net_instance_id: expected a string",
            id="2.0-level",
        ),
    ],
)
def test_reader_rejects_ascend_operator_tables(text: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=re.escape(fragment)):
        read_hccl(text)


def test_table_2_0_fast_validation_agrees_with_the_detailed_one() -> None:
    from ranktable.hccl_table20 import _check_ranks, _well_formed

    good = {
        "rank_id": 0,
        "local_id": 0,
        "device_id": 0,
        "level_list": [
            {
                "net_layer": 0,
                "net_instance_id": "sp",
                "net_type": "TOPO_FILE_DESC",
                "net_attr": "",
                "rank_addr_list": [{"addr_type": "EID", "addr": "a", "ports": ["0/1"], "plane_id": "0"}],
            }
        ],
    }
    broken: list[Any] = [True, "x", -1, None, 1.5, [], {}]
    paths = [("rank_id",), ("local_id",), ("device_id",), ("level_list",), ("level_list", 0)]
    paths += [("level_list", 0, k) for k in ("net_layer", "net_instance_id", "net_type", "net_attr", "rank_addr_list")]
    paths += [("level_list", 0, "rank_addr_list", 0)]
    paths += [("level_list", 0, "rank_addr_list", 0, k) for k in ("addr_type", "addr", "plane_id", "ports")]
    paths += [("level_list", 0, "rank_addr_list", 0, "ports", 0)]
    assert _well_formed([good])
    for path in paths:
        for value in broken:
            rank = json.loads(json.dumps(good))
            parent = rank
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]] = value
            try:
                _check_ranks([rank])
                detailed = True
            except SpecError:
                detailed = False
            assert _well_formed([rank]) is detailed, (path, value)
