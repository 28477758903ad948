"""The Ascend device annotation: what is accepted, and the reason code of every rejection."""

from __future__ import annotations

import json
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
        pytest.param(annotation(super_pod_id="1", devices=devices(("7", "fd00::7"))), id="unknown-keys-and-ipv6"),
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
        pytest.param(annotation(server_id="node-1"), "server_id", "'node-1' is not an IP", id="server-id-not-ip"),
    ],
)
def test_rejections_carry_reason_and_message(text: str, reason: str, fragment: str) -> None:
    with pytest.raises(InvalidDeviceAnnotation) as caught:
        parse_device_annotation(text)
    assert caught.value.reason == reason
    assert reason in REASONS
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("device annotation")


def test_invalid_annotation_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_device_annotation("null")
