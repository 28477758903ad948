"""Bad input on real objects: Warning Events and counters, the daemon keeps running, other jobs unaffected.

Everything here is accepted by the real API server (its validation is the
first filter; what it refuses never reaches the controller) and is wrong for
the controller: device annotations that are not JSON, nested past Python's
recursion limit or carry a number over its digit limit (the last two escaped
the parsers before the property tests found them), a 200 KiB annotation,
ports that are words or out of range, a workload with two tasks of one
name, and names at the API server's length limits. One good job, created
after all of them, must still complete and nothing may crash the daemon.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.controllerproc import ControllerProcess
from tests.support.factories import device_annotation, pod_template, volcano_job
from tests.support.kubehelp import all_members, create_pods, create_volcano_job, events_for, wait_for, wait_spec

pytestmark = pytest.mark.integration

NPU = {"runtime": "ascend-910", "template": pod_template(runtime="ascend-910")}
GOOD_DEVICES = device_annotation("10.0.0.1", [("0", "192.168.0.1")])


def warnings(k8s: Any, namespace: str, name: str, reason: str) -> list[Any]:
    return [e for e in events_for(k8s, namespace, name) if e.type == "Warning" and e.reason == reason]


@pytest.mark.parametrize(
    ("devices", "why"),
    [
        pytest.param("{not json", "json", id="not-json"),
        pytest.param("[" * 3000 + "]" * 3000, "json", id="nested-past-the-recursion-limit"),
        pytest.param(
            '{"devices": [{"device_id": "0", "device_ip": "1.2.3.4"}], "x": ' + "9" * 5000 + "}",
            "json",
            id="number-over-the-digit-limit",
        ),  # fmt: skip
        pytest.param(
            json.dumps(
                {
                    "devices": [{"device_id": "0", "device_ip": "1.2.3.4", "pad": "x" * 200_000}],
                    "host_ip": "not-an-ip",  # server ids need not be IPs (current device plugins write uids)
                }
            ),
            "host_ip",
            id="200KiB-annotation",
        ),  # fmt: skip
        pytest.param(json.dumps({"devices": []}), "empty", id="no-devices"),
    ],
)
def test_a_bad_device_annotation_warns_counts_and_blocks_only_its_job(
    k8s: Any, namespace: str, controller: ControllerProcess, devices: str, why: str
) -> None:
    bad = create_volcano_job(k8s, namespace, volcano_job("npu-bad", tasks=[("worker", 1)], **NPU))
    create_pods(k8s, bad, [("worker", 0)], devices=devices)
    wait_for(lambda: warnings(k8s, namespace, "npu-bad", "InvalidDeviceAnnotation"), what="the Warning Event")
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason=f"device_{why}") or 0) >= 1
    assert wait_spec(k8s, namespace, "rings-config-npu-bad", status="initializing")["members"] == []
    good = create_volcano_job(k8s, namespace, volcano_job("npu-good", tasks=[("worker", 1)], **NPU))
    create_pods(k8s, good, [("worker", 0)], devices=GOOD_DEVICES)
    assert len(wait_spec(k8s, namespace, "rings-config-npu-good")["members"]) == 1
    assert controller.proc is not None and controller.proc.poll() is None
    assert controller.probe("/healthz") == 200


@pytest.mark.parametrize(
    "port",
    [
        pytest.param("http", id="word"),
        pytest.param("70000", id="out-of-range"),
        pytest.param("0", id="zero"),
        pytest.param("9" * 5000, id="over-the-digit-limit"),
    ],
)
def test_a_bad_port_annotation_warns_and_never_publishes_a_wrong_port(
    k8s: Any, namespace: str, controller: ControllerProcess, port: str
) -> None:
    job = create_volcano_job(k8s, namespace, volcano_job("badport", tasks=[("worker", 2)]))
    create_pods(k8s, job, [("worker", 0)])
    create_pods(k8s, job, [("worker", 1)], annotations={"ring-controller/port": port})
    wait_for(lambda: warnings(k8s, namespace, "badport", "InvalidPort"), what="the InvalidPort Event")
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason="invalid_port") or 0) >= 1
    assert wait_spec(k8s, namespace, "rings-config-badport", status="initializing")["members"] == []


def test_duplicate_task_names_are_an_invalid_workload_not_a_crash(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    # The API server's schema accepts it (tasks is a plain list); ranks would be ambiguous.
    create_volcano_job(k8s, namespace, volcano_job("twice", tasks=[("worker", 1), ("worker", 2)]))
    wait_for(lambda: warnings(k8s, namespace, "twice", "InvalidWorkload"), what="the InvalidWorkload Event")
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason="invalid_workload") or 0) >= 1
    good = create_volcano_job(k8s, namespace, volcano_job("after", tasks=[("worker", 2), ("chief", 1)]))
    create_pods(k8s, good, all_members(good))
    spec = wait_spec(k8s, namespace, "rings-config-after")
    assert [(m["task"], m["index"]) for m in spec["members"]] == [("worker", 0), ("worker", 1), ("chief", 0)]
    assert controller.proc is not None and controller.proc.poll() is None


def test_a_job_over_the_member_limit_is_invalid_with_the_limit_in_the_event(
    k8s: Any, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    controller = ControllerProcess(
        kubeconfig=str(kubeconfig), namespace=namespace, log_path=tmp_path / "c.log", extra=["--max-members", "3"]
    )
    controller.start()
    try:
        create_volcano_job(k8s, namespace, volcano_job("huge", tasks=[("worker", 4)]))
        event = wait_for(lambda: warnings(k8s, namespace, "huge", "TooManyMembers"), what="the TooManyMembers Event")
        assert "asks for 4 members, over this controller's limit of 3 (--max-members)" in event[0].message
        assert controller.metric("ringcontroller_invalid_inputs_total", reason="too_many_members") == 1
        assert controller.metric("ringcontroller_jobs", status="invalid") == 1
        assert "too_many_members" in controller.log_tail(50)
        assert k8s.core.list_namespaced_config_map(namespace, label_selector="ring-controller.io/managed").items == []
        fits = create_volcano_job(k8s, namespace, volcano_job("fits", tasks=[("worker", 3)]))
        create_pods(k8s, fits, all_members(fits))
        assert len(wait_spec(k8s, namespace, "rings-config-fits")["members"]) == 3
        assert controller.proc is not None and controller.proc.poll() is None
    finally:
        controller.stop(signal.SIGTERM)


def test_names_at_the_api_servers_limits(k8s: Any, namespace: str, controller: ControllerProcess) -> None:
    # A Job name of 50 characters makes pod names of 50 + len("-worker-0") and
    # a ConfigMap name of 63: all within the API server's limits, all served.
    name = "j" + "x" * 48 + "9"
    job = create_volcano_job(k8s, namespace, volcano_job(name, tasks=[("worker", 1)]))
    create_pods(k8s, job, all_members(job))
    spec = wait_spec(k8s, namespace, f"rings-config-{name}")
    assert spec["job"]["name"] == name and spec["members"][0]["pod"] == f"{name}-worker-0"
