"""``kubectl ring`` against the real API server, with the real controller writing the specs.

Jobs are Volcano Jobs made the way Volcano makes them (its pods by hand, the
dev cluster has no Volcano controller); kwok runs the pods. Each test checks
what the output says (rows, states, reasons, advice, the exported
variables) against what the API server and the ConfigMap hold, not only the
exit code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.support.charts import tool
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import deployment, device_annotation, pod_template, volcano_job, volcano_pod
from tests.support.kubectlring import documented_role, installed, ring, run, section, table, token_kubeconfig
from tests.support.kubehelp import (
    all_members,
    create_pods,
    create_volcano_job,
    events_for,
    read_configmap,
    wait_for,
    wait_spec,
)

pytestmark = pytest.mark.integration

GOOD_DEVICES = device_annotation("10.0.0.1", [("0", "192.168.0.1"), ("1", "192.168.0.2")])


def _running(k8s: Any, namespace: str, name: str) -> Any:
    pod = k8s.core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase == "Running" and pod.status.pod_ip else None


def _ok(result: Any) -> str:
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    assert "Traceback" not in result.stderr
    return str(result.stdout)


def _completed_job(
    k8s: Any, namespace: str, name: str, workers: int, **kw: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    devices = kw.pop("devices", None)
    job = create_volcano_job(k8s, namespace, volcano_job(name, tasks=[("worker", workers)], **kw))
    create_pods(k8s, job, all_members(job), devices=devices)
    return job, wait_spec(k8s, namespace, f"rings-config-{name}")


def test_a_completed_job_in_get_every_format_and_describe(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess
) -> None:
    _, spec = _completed_job(k8s, namespace, "done", 2)
    members = spec["members"]

    rows = table(_ok(ring("get", "-n", namespace, kubeconfig=kubeconfig)))
    assert rows == [
        {
            "KIND": "vcjob",
            "NAME": "done",
            "STATUS": "completed",
            "EPOCH": str(spec["epoch"]),
            "READY": "2/2",
            "AGE": rows[0]["AGE"],
            "CONFIGMAP": "rings-config-done",
        }
    ]
    assert re.fullmatch(r"\d+s|\d+m(\d+s)?", rows[0]["AGE"]), rows[0]["AGE"]

    wide = table(_ok(ring("get", "-n", namespace, "-o", "wide", kubeconfig=kubeconfig)))
    assert (wide[0]["VERSION"], wide[0]["RUNTIME"], wide[0]["LIVE"], wide[0]["PROBLEMS"]) == (
        "0",
        "tensorflow",
        "completed",
        "<none>",
    )

    as_json = json.loads(_ok(ring("get", "-n", namespace, "-o", "json", kubeconfig=kubeconfig)))
    as_yaml = yaml.safe_load(_ok(ring("get", "-n", namespace, "-o", "yaml", kubeconfig=kubeconfig)))
    assert as_json["kind"] == "List" and as_yaml["items"] == as_json["items"]
    (item,) = as_json["items"]
    assert (item["status"], item["epoch"], item["ready"], item["expected"]) == ("completed", spec["epoch"], 2, 2)
    assert [(m["pod"], m["ip"], m["port"], m["node"]) for m in item["members"]] == [
        (m["pod"], m["ip"], m["port"], m["node"]) for m in members
    ]

    # -A lists it with its namespace (among other tests' jobs).
    everywhere = table(_ok(ring("get", "-A", kubeconfig=kubeconfig)))
    assert {"NAMESPACE": namespace, "NAME": "done"}.items() <= next(
        r for r in everywhere if r["NAMESPACE"] == namespace
    ).items()

    text = _ok(ring("describe", "-n", namespace, "done", kubeconfig=kubeconfig))
    assert "Spec:" in text and f"completed, epoch {spec['epoch']}" in text
    listed = table(section(text, "Members (rank order):"))
    pods = {m["pod"]: k8s.core.read_namespaced_pod(m["pod"], namespace) for m in members}
    assert [(r["RANK"], r["POD"], r["ADDRESS"], r["NODE"]) for r in listed] == [
        (str(m["rank"]), m["pod"], f"{pods[m['pod']].status.pod_ip}:2222", pods[m["pod"]].spec.node_name)
        for m in members
    ]
    assert "Why it waits" not in text
    assert "Nothing: the spec is complete" in section(text, "What you can do:")
    # KIND/NAME works too; a wrong kind is no such job.
    assert _ok(ring("describe", "-n", namespace, "vcjob/done", kubeconfig=kubeconfig)).startswith("Name:")
    wrong = ring("describe", "-n", namespace, "deploy/done", kubeconfig=kubeconfig)
    assert wrong.returncode == 1 and "no job 'deploy/done'" in wrong.stderr and "Traceback" not in wrong.stderr

    # As users call it: `kubectl ring`, the plugin found on PATH by the real kubectl.
    path = f"{Path(installed('kubectl-ring')).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    through = subprocess.run(
        [str(tool("kubectl")), "ring", "get", "-n", namespace, "-o", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path, "KUBECONFIG": str(kubeconfig)},
        timeout=60,
        check=False,
    )
    (via_kubectl,) = json.loads(_ok(through))["items"]
    assert (via_kubectl["name"], via_kubectl["status"], via_kubectl["epoch"]) == ("done", "completed", spec["epoch"])


def test_describe_a_job_waiting_on_a_missing_pod_an_unscheduled_pod_and_a_pod_without_ip(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess
) -> None:
    job = create_volcano_job(k8s, namespace, volcano_job("waits", tasks=[("worker", 4)]))
    create_pods(k8s, job, [("worker", 0), ("worker", 2)])
    # An unschedulable pod: worker 1 with a node selector no node matches. Created so from the
    # start: deleting a bound pod and recreating its name races kwok's delete of the old one.
    body = volcano_pod(job, task="worker", index=1)
    body["spec"]["nodeSelector"] = {"ring-test/no-such-node": "x"}
    k8s.core.create_namespaced_pod(namespace, body)
    wait_for(lambda: _running(k8s, namespace, "waits-worker-2"), what="worker 2 Running")
    # A Running pod without an IP: its IP taken away through the status subresource (kwok leaves it so).
    k8s.core.patch_namespaced_pod_status("waits-worker-2", namespace, {"status": {"podIP": None, "podIPs": None}})
    wait_for(lambda: _running(k8s, namespace, "waits-worker-0"), what="worker 0 Running")
    wait_for(lambda: _unscheduled(k8s, namespace, "waits-worker-1"), what="worker 1 unschedulable")
    initializing = wait_spec(k8s, namespace, "rings-config-waits", status="initializing")

    (row,) = table(_ok(ring("get", "-n", namespace, kubeconfig=kubeconfig)))
    assert (row["STATUS"], row["READY"]) == ("initializing", "1/4")

    text = _ok(ring("describe", "-n", namespace, "waits", kubeconfig=kubeconfig))
    print(text)
    slots = {r["RANK"]: r for r in table(section(text, "Members (rank order, as the controller sees them now):"))}
    w0 = _running(k8s, namespace, "waits-worker-0")
    assert (slots["0"]["POD"], slots["0"]["ADDRESS"], slots["0"]["STATE"]) == (
        "waits-worker-0",
        f"{w0.status.pod_ip}:2222",
        "counts",
    )
    assert (slots["1"]["POD"], slots["1"]["STATE"]) == ("waits-worker-1", "not running")
    assert (slots["2"]["POD"], slots["2"]["ADDRESS"], slots["2"]["STATE"]) == ("waits-worker-2", "-", "no IP")
    assert (slots["3"]["POD"], slots["3"]["STATE"]) == ("<none>", "no pod")
    why = section(text, "Why it waits:")
    assert "rank 1 (worker 1): pod waits-worker-1 phase Pending; Unschedulable:" in why
    assert "rank 2 (worker 2): pod waits-worker-2 Running but has no pod IP yet" in why
    assert "rank 3 (worker 3): no pod for this slot" in why
    assert "rank 0" not in why
    advice = section(text, "What you can do:")
    assert "Slots without a pod" in advice and f"kubectl describe vcjob/waits -n {namespace}" in advice
    assert "Pods not Running (waits-worker-1)" in advice
    assert "Running pods without an IP (waits-worker-2)" in advice
    assert section(text, "Warning Events:").strip() == "<none>"

    # -o json says the same, as data: every slot, its state, the reason it waits.
    data = json.loads(_ok(ring("describe", "-n", namespace, "waits", "-o", "json", kubeconfig=kubeconfig)))
    assert (data["status"], data["ready"], data["expected"]) == ("initializing", 1, 4)
    assert [(s["rank"], s["pod"], s["state"]) for s in data["slots"]] == [
        (0, "waits-worker-0", "counting"),
        (1, "waits-worker-1", "not_running"),
        (2, "waits-worker-2", "no_ip"),
        (3, None, "missing"),
    ]
    assert (data["slots"][0]["ip"], data["slots"][0]["port"], data["slots"][0]["why"]) == (w0.status.pod_ip, 2222, None)
    assert [s["why"] for s in data["slots"][1:]] == [line.strip() for line in why.splitlines()]
    assert data["warningEvents"] == [] and len(data["advice"]) == 3
    assert (
        yaml.safe_load(_ok(ring("describe", "-n", namespace, "waits", "-o", "yaml", kubeconfig=kubeconfig)))["slots"]
        == data["slots"]
    )

    # ring-launch in the waiting pod would wait: env says so, with the spec's own words, and exits 4.
    waiting = ring("env", "-n", namespace, "waits-worker-0", kubeconfig=kubeconfig)
    assert waiting.returncode == 4, waiting.stderr
    assert f"would still wait: spec initializing: epoch {initializing['epoch']}, members 0/4" in waiting.stderr
    assert "container main does not run ring-launch" in waiting.stderr  # the factory's template runs train.py


def _unscheduled(k8s: Any, namespace: str, name: str) -> bool:
    pod = k8s.core.read_namespaced_pod(name, namespace)
    return any(c.type == "PodScheduled" and c.status == "False" for c in pod.status.conditions or [])


def _warned(k8s: Any, namespace: str, name: str, reasons: set[str]) -> bool:
    seen = {e.reason for e in events_for(k8s, namespace, name) if e.type == "Warning"}
    return reasons <= seen


def test_describe_an_invalid_job_bad_device_annotation_and_bad_port(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess
) -> None:
    npu = {"runtime": "ascend-910", "template": pod_template(runtime="ascend-910", npus=2)}
    job = create_volcano_job(k8s, namespace, volcano_job("npu", tasks=[("worker", 3)], **npu))
    bad_ip = {"server_id": "10.0.0.1", "devices": [{"device_id": "0", "device_ip": "999.1.1.1"}]}
    create_pods(k8s, job, [("worker", 0)], devices=GOOD_DEVICES)
    create_pods(k8s, job, [("worker", 1)], devices=bad_ip)
    create_pods(k8s, job, [("worker", 2)], devices=GOOD_DEVICES, annotations={"ring-controller/port": "http"})
    wait_for(
        lambda: _warned(k8s, namespace, "npu", {"InvalidDeviceAnnotation", "InvalidPort"}), what="both Warning Events"
    )
    # A second job whose workload is invalid (two tasks of one name): no spec can be written.
    create_volcano_job(k8s, namespace, volcano_job("twice", tasks=[("worker", 1), ("worker", 1)]))
    wait_for(lambda: _warned(k8s, namespace, "twice", {"InvalidWorkload"}), what="the InvalidWorkload Event")

    rows = {r["NAME"]: r for r in table(_ok(ring("get", "-n", namespace, "-o", "wide", kubeconfig=kubeconfig)))}
    assert (rows["npu"]["STATUS"], rows["npu"]["READY"], rows["npu"]["RUNTIME"]) == (
        "initializing",
        "1/3",
        "ascend-910",
    )
    assert rows["npu"]["PROBLEMS"] == "device_ip,invalid_port"
    assert (rows["twice"]["STATUS"], rows["twice"]["PROBLEMS"]) == ("invalid", "invalid_workload")

    text = _ok(ring("describe", "-n", namespace, "npu", kubeconfig=kubeconfig))
    print(text)
    slots = {r["RANK"]: r for r in table(section(text, "Members (rank order, as the controller sees them now):"))}
    assert [(slots[r]["STATE"], slots[r]["DEVICES"]) for r in "012"] == [
        ("counts", "0,1"),
        ("bad devices", "invalid"),  # the parser rejects it: no device ids to show
        ("bad port", "0,1"),
    ]
    why = section(text, "Why it waits:")
    assert "rank 1 (worker 1): pod npu-worker-1: invalid device annotation:" in why and "999.1.1.1" in why
    assert "rank 2 (worker 2): pod npu-worker-2: " in why and "http" in why
    events = table(section(text, "Warning Events:"))
    assert {e["REASON"] for e in events} == {"InvalidDeviceAnnotation", "InvalidPort"}
    assert any("999.1.1.1" in e["MESSAGE"] for e in events)
    advice = section(text, "What you can do:")
    assert "Bad device annotations (npu-worker-1)" in advice and "Bad ports (npu-worker-2)" in advice

    invalid = _ok(ring("describe", "-n", namespace, "twice", kubeconfig=kubeconfig))
    print(invalid)
    assert "Job twice: " in section(invalid, "Why it waits:")
    assert section(invalid, "Why it waits:").splitlines()[0] == "  Job twice: task names are not unique"
    assert "The workload itself is invalid" in section(invalid, "What you can do:")
    assert "has not written" not in invalid  # it never writes an invalid job's spec: no false lead
    assert "InvalidWorkload" in section(invalid, "Warning Events:")


def test_describe_a_deployment_lists_its_members_in_creation_order(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess
) -> None:
    k8s.apps.create_namespaced_deployment(namespace, deployment("web", 3))
    spec = wait_spec(k8s, namespace, "rings-config-web")
    text = _ok(ring("describe", "-n", namespace, "deploy/web", kubeconfig=kubeconfig))
    assert "Kind:        Deployment (apps/v1), deploy/web" in text
    listed = table(section(text, "Members (rank order):"))
    assert [(r["RANK"], r["POD"], r["ADDRESS"]) for r in listed] == [
        (str(m["rank"]), m["pod"], f"{m['ip']}:{m['port']}") for m in spec["members"]
    ]
    assert [m["port"] for m in spec["members"]] == [4000, 4000, 4000]
    (row,) = table(_ok(ring("get", "-n", namespace, kubeconfig=kubeconfig)))
    assert (row["KIND"], row["NAME"], row["STATUS"], row["READY"]) == ("deploy", "web", "completed", "3/3")


def test_env_is_what_ring_launch_prints_in_that_pod(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess, tmp_path: Path
) -> None:
    template = pod_template(configmap="rings-config-envjob")
    container = template["spec"]["containers"][0]
    container["command"] = ["ring-launch", "--hostfile-dir", "/work/hosts", "--", "python", "train.py"]
    container["env"] = [{"name": "RING_HOSTFILE_DIR", "value": "/ignored/the/flag/wins"}]
    job = create_volcano_job(
        k8s, namespace, volcano_job("envjob", tasks=[("chief", 1), ("worker", 2)], template=template)
    )
    create_pods(k8s, job, all_members(job))
    spec = wait_spec(k8s, namespace, "rings-config-envjob")
    cluster = [f"{m['ip']}:{m['port']}" for m in spec["members"] if m["role"] == "worker"]
    for member in spec["members"]:
        pod = k8s.core.read_namespaced_pod(member["pod"], namespace)
        env = json.loads(_ok(ring("env", "-n", namespace, member["pod"], "-o", "json", kubeconfig=kubeconfig)))
        # What the spec implies, independently of the launcher's code.
        tf = json.loads(env["TF_CONFIG"])
        assert tf["cluster"]["worker"] == cluster
        assert tf["cluster"]["chief"] == [f"{spec['members'][0]['ip']}:2222"]
        assert tf["task"] == {"type": member["role"], "index": member["index"]}
        assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == (
            str(member["rank"]),
            "3",
            spec["members"][0]["ip"],
        )
        assert env["RING_HOSTFILE"] == "/work/hosts/hostfile"
        assert env["RING_EPOCH"] == str(spec["epoch"])
        # And exactly what ring-launch itself prints for that pod, reading the same ConfigMap through the API.
        launched = run(
            "ring-launch",
            "--from-api",
            "--namespace",
            namespace,
            "--configmap",
            "rings-config-envjob",
            "--kubeconfig",
            str(kubeconfig),
            "--pod",
            member["pod"],
            "--hostfile-dir",
            "/work/hosts",
            "--timeout",
            "20",
            "--print",
            "json",
            env={"POD_UID": pod.metadata.uid, "POD_IP": pod.status.pod_ip, "TMPDIR": str(tmp_path)},
        )
        assert launched.returncode == 0, launched.stderr
        assert json.loads(launched.stdout) == env
        # The default format is ring-launch --print env's.
        assert _ok(ring("env", "-n", namespace, member["pod"], kubeconfig=kubeconfig)) == _env_lines(env)
    unknown = ring("env", "-n", namespace, "no-such-pod", kubeconfig=kubeconfig)
    assert unknown.returncode == 1 and "pod 'no-such-pod' not found" in unknown.stderr


def _env_lines(env: dict[str, str]) -> str:
    import shlex

    return "".join(f"{k}={shlex.quote(env[k])}\n" for k in sorted(env))


def test_env_of_an_ascend_pod_names_the_mounted_rank_table(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess
) -> None:
    template = pod_template(runtime="ascend-910", npus=2, configmap="rings-config-npuenv")
    template["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = "/etc/ring-config"
    job = create_volcano_job(
        k8s, namespace, volcano_job("npuenv", tasks=[("worker", 1)], runtime="ascend-910", template=template)
    )
    create_pods(k8s, job, all_members(job), devices=GOOD_DEVICES)
    wait_spec(k8s, namespace, "rings-config-npuenv")
    cm = read_configmap(k8s, namespace, "rings-config-npuenv")
    assert "hccl.json" in cm.data
    env = json.loads(_ok(ring("env", "-n", namespace, "npuenv-worker-0", "-o", "json", kubeconfig=kubeconfig)))
    assert env["RANK_TABLE_FILE"] == "/etc/ring-config/hccl.json"
    assert (env["RANK_ID"], env["RANK_SIZE"]) == ("0", "2")


def test_the_documented_read_only_role_is_enough_and_less_is_a_clear_error(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess, tmp_path: Path
) -> None:
    role = documented_role()
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list"}
    _, spec = _completed_job(k8s, namespace, "viewed", 2)
    name = f"ring-viewer-{namespace}"[:63]
    role["metadata"]["name"] = name
    k8s.core.create_namespaced_service_account(namespace, {"metadata": {"name": "viewer"}})
    token = k8s.core.create_namespaced_service_account_token(
        "viewer", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    viewer = token_kubeconfig(kubeconfig, token, tmp_path / "viewer.kubeconfig")
    k8s.rbac.create_cluster_role(role)
    try:
        # Not bound yet: forbidden, said in one line, no traceback.
        denied = ring("get", "-n", namespace, kubeconfig=viewer)
        assert denied.returncode == 1 and "forbidden (403)" in denied.stderr and "Traceback" not in denied.stderr
        k8s.rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}],
            }
        )
        wait_for(lambda: ring("get", "-n", namespace, kubeconfig=viewer).returncode == 0, what="the binding to apply")
        admin_view = json.loads(_ok(ring("get", "-n", namespace, "-o", "json", kubeconfig=kubeconfig)))
        assert json.loads(_ok(ring("get", "-n", namespace, "-o", "json", kubeconfig=viewer))) == admin_view
        assert _ok(ring("get", "-A", kubeconfig=viewer))
        text = _ok(ring("describe", "-n", namespace, "viewed", kubeconfig=viewer))
        assert "Members (rank order):" in text
        pod = spec["members"][0]["pod"]
        assert json.loads(_ok(ring("env", "-n", namespace, pod, "-o", "json", kubeconfig=viewer))) == json.loads(
            _ok(ring("env", "-n", namespace, pod, "-o", "json", kubeconfig=kubeconfig))
        )
    finally:
        for delete in (k8s.rbac.delete_cluster_role_binding, k8s.rbac.delete_cluster_role):
            try:
                delete(name)
            except ApiException as err:
                if err.status != 404:  # absent already is fine; anything else is a failure
                    raise


def test_an_unreachable_api_server_is_one_line_and_exit_1(tmp_path: Path, kubeconfig: Path) -> None:
    config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(yaml.safe_dump(config), encoding="utf-8")
    for args in (("get", "-A"), ("describe", "x"), ("env", "x")):
        result = ring(*args, kubeconfig=dead)
        assert result.returncode == 1, result
        assert result.stderr.startswith("error: cannot reach the API server at https://127.0.0.1:1")
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
