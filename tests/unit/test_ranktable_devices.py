"""The Ascend device annotation: what is accepted, and the reason code of every rejection."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from ranktable.clusterspec import Device
from ranktable.devices import REASONS, DeviceAnnotation, InvalidDeviceAnnotation, parse_device_annotation


def annotation(**changes: Any) -> str:
    value: dict[str, Any] = {
        "pod_name": "0",
        "server_id": "192.168.0.10",
        "devices": [
            {"device_id": "0", "device_ip": "192.168.100.100"},
            {"device_id": "1", "device_ip": "192.168.101.100"},
        ],
    }
    value.update(changes)
    return json.dumps(value)


def devices(*pairs: tuple[Any, Any]) -> list[dict[str, Any]]:
    return [{"device_id": i, "device_ip": ip} for i, ip in pairs]


def test_valid_annotation_keeps_order_and_server_id() -> None:
    parsed = parse_device_annotation(annotation())
    assert parsed == DeviceAnnotation(
        server_id="192.168.0.10",
        devices=(Device("0", "192.168.100.100"), Device("1", "192.168.101.100")),
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(json.dumps({"devices": devices(("3", "10.0.0.3"))}), id="server-id-absent"),
        pytest.param(annotation(server_id=""), id="server-id-empty"),
        pytest.param(
            annotation(rack_id=0, server_index="0", server_ip="1.2.3.4", devices=devices(("7", "fd00::7"))),
            id="unknown-keys-and-ipv6",
        ),
        pytest.param(annotation(server_id="5c1e6a0e-7b7c-4d0e-9b1e-0c6f7a1d2e3f"), id="server-id-is-a-pod-uid"),
        pytest.param(annotation(pod_name="job-worker-0"), id="pod-name-is-a-name"),
    ],
)
def test_accepted_variants(text: str) -> None:
    assert parse_device_annotation(text).devices


@pytest.mark.parametrize(
    ("text", "reason", "fragment"),
    [
        pytest.param("{", "json", "not valid JSON", id="truncated-json"),
        pytest.param("", "json", "not valid JSON", id="empty-text"),
        pytest.param("[]", "schema", "must be a JSON object", id="list-not-object"),
        pytest.param(json.dumps({"server_id": "1.2.3.4"}), "schema", "devices is missing", id="devices-missing"),
        pytest.param(annotation(devices={"0": "1.2.3.4"}), "schema", "devices must be a list", id="devices-object"),
        pytest.param(annotation(devices=["0"]), "schema", "devices[0] must be an object", id="device-not-object"),
        pytest.param(annotation(devices=devices((0, "1.2.3.4"))), "schema", "string device_id", id="device-id-number"),
        pytest.param(
            annotation(devices=[{"device_id": "0"}]), "schema", "string device_id and device_ip", id="device-ip-missing"
        ),
        pytest.param(annotation(pod_name=0), "schema", "pod_name must be a string", id="pod-name-number"),
        pytest.param(annotation(server_id=10), "schema", "server_id must be a string", id="server-id-number"),
        pytest.param(annotation(devices=[]), "empty", "devices is empty", id="devices-empty"),
        pytest.param(annotation(devices=devices(("-1", "1.2.3.4"))), "device_id", "'-1'", id="device-id-negative"),
        pytest.param(annotation(devices=devices(("a", "1.2.3.4"))), "device_id", "'a'", id="device-id-letters"),
        pytest.param(annotation(devices=devices(("01", "1.2.3.4"))), "device_id", "'01'", id="device-id-leading-zero"),
        pytest.param(annotation(devices=devices((" 1", "1.2.3.4"))), "device_id", "' 1'", id="device-id-space"),
        pytest.param(
            annotation(devices=devices(("0", "1.2.3"))), "device_ip", "'1.2.3' is not an IP", id="device-ip-short"
        ),
        pytest.param(annotation(devices=devices(("0", "256.1.1.1"))), "device_ip", "256.1.1.1", id="device-ip-octet"),
        pytest.param(annotation(devices=devices(("0", "npu0"))), "device_ip", "npu0", id="device-ip-name"),
        pytest.param(
            annotation(devices=devices(("0", "1.1.1.1"), ("0", "1.1.1.2"))),
            "duplicate",
            "device_id '0' appears twice",
            id="duplicate-id",
        ),
        pytest.param(
            annotation(devices=devices(("0", "1.1.1.1"), ("1", "1.1.1.1"))),
            "duplicate",
            "device_ip '1.1.1.1' appears twice",
            id="duplicate-ip",
        ),
        pytest.param(annotation(server_id="node 1"), "server_id", "'node 1' is not a server id", id="server-id-space"),
        pytest.param(annotation(host_ip="node-1"), "host_ip", "'node-1' is not an IP", id="host-ip-not-ip"),
        pytest.param(annotation(host_ip=7), "schema", "host_ip must be a string", id="host-ip-number"),
        pytest.param(
            annotation(super_pod_id="1"), "schema", "super_pod_id must be an integer", id="super-pod-id-string"
        ),
        pytest.param(
            annotation(devices=[{"device_id": "0", "device_ip": "1.1.1.1", "super_device_id": 7}]),
            "schema",
            "super_device_id must be a string",
            id="super-device-id-number",
        ),
        pytest.param(
            annotation(devices=[{"device_id": "0", "device_ip": "1.1.1.1", "levelList": {"level": 0}}]),
            "level_list",
            "devices[0].levelList: expected a list",
            id="level-list-object",
        ),
        pytest.param(
            annotation(devices=[{"device_id": "0", "device_ip": "1.1.1.1", "levelList": [{"level": "0"}]}]),
            "level_list",
            "levelList[0].level: '0' is not a non-negative integer",
            id="level-string",
        ),
        pytest.param(
            annotation(devices=[{"device_id": "0", "device_ip": "1.1.1.1", "levelList": [{"level": 0}, {"level": 0}]}]),
            "level_list",
            "level: 0 appears twice",
            id="level-twice",
        ),
        pytest.param(
            annotation(
                devices=[
                    {
                        "device_id": "0",
                        "device_ip": "1.1.1.1",
                        "levelList": [{"level": 0, "info": {"UB": {"rank_addr_list": [{"ports": [0]}]}}}],
                    }
                ]
            ),
            "level_list",
            "info.UB.rank_addr_list[0].ports: expected a list of strings",
            id="level-port-number",
        ),
    ],
)
def test_rejections_carry_reason_and_message(text: str, reason: str, fragment: str) -> None:
    with pytest.raises(InvalidDeviceAnnotation, match=f"^device annotation.*{re.escape(fragment)}") as caught:
        parse_device_annotation(text)
    assert caught.value.reason == reason
    assert reason in REASONS


def test_invalid_annotation_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="^device annotation must be a JSON object$"):
        parse_device_annotation("null")


# The newer annotation (current device plugin and Volcano's Ascend plugin) ----------------------------

LEVELS = [
    {"level": 0, "info": {"UB": {"net_layer": 0, "net_instance_id": "L0", "net_type": "TOPO_FILE_DESC",
                                 "net_attr": "", "rank_addr_list": [{"addr_type": "EID", "addr": "e0",
                                                                     "ports": ["0/1"], "plane_id": "1"}]}}},
    {"level": 3, "info": {"ROCE": {"net_layer": 3, "net_instance_id": "L3"}}},
]  # fmt: skip


def test_newer_annotation_fields_are_read() -> None:
    text = json.dumps(
        {
            "pod_name": "job-worker-0",
            "server_id": "uid-1",
            "host_ip": "192.168.0.10",
            "super_pod_id": 3,
            "rack_id": 0,
            "server_index": "0",
            "server_ip": "192.168.0.10",
            "devices": [
                {"device_id": "0", "device_ip": "192.168.100.1", "super_device_id": "37748736", "levelList": LEVELS},
                {"device_id": "1", "device_ip": "192.168.100.2", "super_device_id": "-2"},
            ],
        }
    )
    parsed = parse_device_annotation(text)
    assert (parsed.server_id, parsed.host_ip, parsed.super_pod_id) == ("uid-1", "192.168.0.10", 3)
    first, second = parsed.devices
    assert first.super_device_id == "37748736"
    assert second.super_device_id == ""  # the plugin's "-2": unknown
    assert [level.level for level in first.levels] == [0, 3]
    ub = first.levels[0].element("UB")
    assert ub is not None and ub.rank_addrs[0].ports == ("0/1",)
    roce = first.levels[1].element("ROCE")
    assert roce is not None and (roce.net_type, roce.rank_addrs) == ("", ())  # absent keys: zero values
    assert second.levels == ()


def test_negative_super_pod_id_means_unknown() -> None:
    assert parse_device_annotation(annotation(super_pod_id=-1)).super_pod_id is None


@pytest.mark.parametrize("placeholder", ["-1", "-.-.-.-", ""], ids=["plugin-error-code", "dotted-dashes", "empty"])
def test_placeholder_device_ips_pass_the_parser_and_are_marked(placeholder: str) -> None:
    # Whether a table may use such a device depends on its version: ranktable.hccl.device_problem.
    parsed = parse_device_annotation(annotation(devices=devices(("0", placeholder), ("1", placeholder))))
    assert [d.has_ip for d in parsed.devices] == [False, False]
