"""Properties of the parsers that read text other components wrote.

The device-annotation parser reads what a device plugin (or anyone with pod
write access) put on a pod; the launcher's reader reads a directory the
kubelet swaps under it. For any input they either give a value the rest of
the code can trust or fail with their own error type, never another
exception (a crash loop in the daemon, a traceback in the container).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ranktable.clusterspec import PodNotInSpec, SpecError, spec_to_json
from ranktable.devices import REASONS, DeviceAnnotation, InvalidDeviceAnnotation, parse_device_annotation
from ranktable.hccl import render_hccl
from ranktable.launch.wait import MALFORMED_READS, FileSource, Identity, Observation, Ready, WaitTimeout, wait_for_spec
from tests.support.specs import make_spec

# -- the device annotation -----------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
device = st.fixed_dictionaries(
    {"device_id": st.integers(0, 63).map(str), "device_ip": ipv4},
    optional={"extra": json_values},
)
near_valid = st.fixed_dictionaries(
    {"devices": st.lists(device | json_values, max_size=4)},
    optional={"server_id": ipv4 | json_values, "pod_name": st.text(max_size=5) | json_values},
)
DEEP = "[" * 5000 + "]" * 5000
HUGE_NUMBER = '{"devices": [{"device_id": "0", "device_ip": "1.2.3.4"}], "pod_name": ' + "9" * 5000 + "}"


def check_parse(text: str) -> DeviceAnnotation | None:
    try:
        parsed = parse_device_annotation(text)
    except InvalidDeviceAnnotation as err:
        assert err.reason in REASONS and str(err)
        return None
    assert parsed.devices, "a valid annotation has devices"
    ids = [d.device_id for d in parsed.devices]
    ips = [d.device_ip for d in parsed.devices]
    assert len(set(ids)) == len(ids) and len(set(ips)) == len(ips)
    return parsed


@given(st.text(max_size=200))
@example(DEEP)
@example(HUGE_NUMBER)
@example("\ud800")
@example('{"devices": [{"device_id": "01", "device_ip": "1.2.3.4"}]}')
def test_device_parser_on_arbitrary_text_returns_or_raises_its_own_error(text: str) -> None:
    check_parse(text)


def is_ip(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def well_formed(obj: dict[str, Any]) -> bool:
    """The annotation contract, restated: a non-empty list of objects with a
    canonical integer-string id and an IP string each, no id or IP twice;
    server_id empty or an IP; pod_name a string."""
    devices = obj["devices"]
    return (
        bool(devices)
        and all(
            isinstance(d, dict)
            and isinstance(d.get("device_id"), str)
            and re.fullmatch(r"0|[1-9][0-9]*", d["device_id"]) is not None
            and is_ip(d.get("device_ip"))
            for d in devices
        )
        and len({d["device_id"] for d in devices}) == len(devices)
        and len({d["device_ip"] for d in devices}) == len(devices)
        and isinstance(obj.get("server_id", ""), str)
        and (obj.get("server_id", "") == "" or is_ip(obj["server_id"]))
        and isinstance(obj.get("pod_name", ""), str)
    )


@given(near_valid)
@example({"devices": [{"device_id": "0", "device_ip": "1.2.3.4"}, {"device_id": "0", "device_ip": "1.2.3.5"}]})
@example({"devices": [{"device_id": "1", "device_ip": "1.2.3.4"}], "server_id": 7})
def test_device_parser_on_arbitrary_json_accepts_exactly_the_well_formed(obj: dict[str, Any]) -> None:
    parsed = check_parse(json.dumps(obj))
    assert (parsed is not None) == well_formed(obj), obj
    if parsed is not None:
        assert [(d.device_id, d.device_ip) for d in parsed.devices] == [
            (d["device_id"], d["device_ip"]) for d in obj["devices"]
        ]
        assert parsed.server_id == obj.get("server_id", "")


# -- the launcher's reader -----------------------------------------------------------------


SPEC = spec_to_json(make_spec([("worker", 2)], epoch=3))
SPEC_DEVICES = make_spec([("worker", 2)], devices=2, epoch=4)


class Thrice:
    """A source showing one observation three times (a malformed text is then an error for good)."""

    where = "test"

    def __init__(self, obs: Observation) -> None:
        self.obs = obs

    def observe(self, deadline: float) -> Iterator[Observation]:
        del deadline
        yield from [self.obs] * MALFORMED_READS

    def rank_table_path(self, hccl: str) -> str:
        return "unused"


def judge(cluster: str | None, hccl: str | None = None, *, final: bool = False) -> Ready | str | None:
    """Ready, "waiting" (the wait would go on), or None (malformed for good); nothing else may escape."""
    try:
        return wait_for_spec(
            Thrice(Observation(cluster=cluster, hccl=hccl, final=final)), Identity(pod="job-worker-1"), timeout=60
        )
    except (WaitTimeout, PodNotInSpec):
        return "waiting"
    except SpecError:
        return None


@given(st.integers(0, len(SPEC) - 1))
def test_a_truncated_spec_is_never_ready(cut: int) -> None:
    verdict = judge(SPEC[:cut])
    assert not isinstance(verdict, Ready)


@given(st.integers(0, 400), st.data())
def test_a_truncated_rank_table_is_never_ready(cut: int, data: Any) -> None:
    hccl = render_hccl(SPEC_DEVICES, version=data.draw(st.sampled_from(["v1", "v2"])))
    assert isinstance(judge(spec_to_json(SPEC_DEVICES), hccl), Ready)
    verdict = judge(spec_to_json(SPEC_DEVICES), hccl[: min(cut, len(hccl) - 1)])
    assert not isinstance(verdict, Ready)


@given(st.binary(max_size=300), st.booleans())
@example(SPEC.encode()[:-1] + b"\xff", False)
@example(("[" * 5000).encode(), True)
def test_arbitrary_bytes_in_the_files_are_a_verdict_or_a_spec_error(raw: bytes, final: bool) -> None:
    text = raw.decode("utf-8", errors="replace")  # exactly how the reader decodes (non-UTF-8 included)
    judge(text, text, final=final)


def publish(root: Path, version: int, cluster: bytes, hccl: bytes) -> None:
    """One kubelet-style atomic swap: a new timestamped dir, ``..data`` renamed over."""
    target = root / f"..v{version}"
    target.mkdir()
    (target / "cluster.json").write_bytes(cluster)
    (target / "hccl.json").write_bytes(hccl)
    tmp = root / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, root / "..data")
    for name in ("cluster.json", "hccl.json"):
        if not (root / name).is_symlink():
            (root / name).symlink_to(f"..data/{name}")


@settings(max_examples=8)
@given(contents=st.lists(st.binary(max_size=64), min_size=2, max_size=5, unique=True))
def test_reads_under_symlink_swaps_see_both_files_from_one_version(
    tmp_path_factory: pytest.TempPathFactory, contents: list[bytes]
) -> None:
    root = tmp_path_factory.mktemp("cfg")
    # Version v holds (content, content + marker v): a mixed read would pair two versions.
    versions = [(c, c + b"|" + str(v).encode()) for v, c in enumerate(contents)]
    expected = {(c.decode("utf-8", errors="replace"), h.decode("utf-8", errors="replace")) for c, h in versions}
    publish(root, 0, *versions[0])
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        n = 1
        while not stop.is_set():
            v = n % len(versions)
            publish(root, n, *versions[v])
            old = root / f"..v{n - 1}"
            for f in old.iterdir():
                f.unlink()
            old.rmdir()  # the kubelet deletes the previous version right after the swap
            n += 1
            swaps = n

    thread = threading.Thread(target=swapper)
    thread.start()
    source = FileSource(str(root))
    seen: set[tuple[str | None, str | None]] = set()
    deadline = time.monotonic() + 10
    try:
        # Read through at least 80 swaps, and until every version has been read:
        # a reader that stopped looking (a cached first read) never gets there.
        while (swaps < 80 or len(seen) < len(versions)) and time.monotonic() < deadline:
            obs = source.read()
            assert (obs.cluster, obs.hccl) in expected, (obs, expected)
            seen.add((obs.cluster, obs.hccl))
    finally:
        stop.set()
        thread.join()
    assert seen == expected, f"after {swaps} swaps the reads saw {len(seen)} of {len(versions)} versions"
