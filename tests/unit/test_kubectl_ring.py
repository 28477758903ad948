"""``kubectl ring`` on plain data: job views, tables, describe text, advice, env; the CLI's usage errors.

The views must agree with the controller: the ConfigMaps here are written by
``decide()`` itself, and the env of a pod is compared with what
``ring-launch --print json`` prints for the same files.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.decide import COUNTS, SLOT_STATES, decide
from model.configmap import configmap_body
from model.pod import pod_record
from model.volcano import workload_record
from ranktable.clusterspec import PodNotInSpec
from ranktable.launch import launcher
from ringcontroller.kubectl_ring import cli, render
from ringcontroller.kubectl_ring.jobs import Snapshot, age, find, launch_setup, pod_env, views
from tests.support.factories import (
    indexed_job,
    job_pod,
    jobset,
    pod_template,
    statefulset,
    statefulset_pod,
    volcano_job,
    volcano_pod,
)
from tests.support.kubectlring import section, table

LABEL = "ring-controller.atlas"
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def _job(name: str = "j", replicas: int = 2, **kw: Any) -> dict[str, Any]:
    return volcano_job(name, namespace="ns", tasks=[("worker", replicas)], uid=f"{name}-uid", **kw)


def _pods(job: dict[str, Any], indices: list[int], **kw: Any) -> list[dict[str, Any]]:
    return [
        volcano_pod(
            job,
            task="worker",
            index=i,
            uid=f"{job['metadata']['name']}-u{i}",
            ip=f"127.1.0.{i + 1}",
            phase="Running",
            node="n1",
            **kw,
        )
        for i in indices
    ]


def _written(job: dict[str, Any], pods: list[dict[str, Any]], *, at: str = "2026-12-01T11:59:00Z") -> dict[str, Any]:
    """The ConfigMap the controller writes for these pods (decide's own data)."""
    wl = workload_record(job, label_key=LABEL)
    decision = decide(wl, [pod_record(p) for p in pods], previous=None)
    assert decision.data is not None
    body = configmap_body(namespace="ns", name=wl.configmap, job=wl.key, owner=wl.owner_reference(), data=decision.data)
    body["metadata"]["managedFields"] = [{"manager": "ring-controller", "operation": "Update", "time": at}]
    return body


def _snapshot(job: dict[str, Any], pods: list[dict[str, Any]], cm: dict[str, Any] | None) -> Snapshot:
    cms = {f"ns/{cm['metadata']['name']}": cm} if cm is not None else {}
    return Snapshot(workloads=(("vcjob", job),), pods=tuple(pods), configmaps=cms)


def test_a_completed_job_reads_as_the_controller_wrote_it() -> None:
    job = _job()
    pods = _pods(job, [0, 1])
    (view,) = views(_snapshot(job, pods, _written(job, pods)), label_key=LABEL)
    assert (view.status, view.live, view.behind, view.ready) == ("completed", "completed", False, 2)
    rows = table(render.get_table([view], now=NOW))
    assert rows == [
        {
            "KIND": "vcjob",
            "NAME": "j",
            "STATUS": "completed",
            "EPOCH": "1",
            "READY": "2/2",
            "AGE": "60s",
            "CONFIGMAP": "rings-config-j",
        }
    ]
    (wide,) = table(render.get_table([view], wide=True, all_namespaces=True, now=NOW))
    assert (wide["NAMESPACE"], wide["RUNTIME"], wide["LIVE"], wide["PROBLEMS"]) == (
        "ns",
        "tensorflow",
        "completed",
        "<none>",
    )
    data = render.get_data([view])["items"][0]
    assert [(m["rank"], m["pod"], m["ip"]) for m in data["members"]] == [
        (0, "j-worker-0", "127.1.0.1"),
        (1, "j-worker-1", "127.1.0.2"),
    ]
    assert data["waiting"] == [] and data["specWritten"] == "2026-12-01T11:59:00Z"
    text = render.describe_text(view, label_key=LABEL, now=NOW)
    assert [r["ADDRESS"] for r in table(section(text, "Members (rank order):"))] == ["127.1.0.1:2222", "127.1.0.2:2222"]
    assert "Nothing: the spec is complete" in text


def test_a_pod_gone_after_completion_shows_the_live_view_and_that_the_controller_is_behind() -> None:
    job = _job()
    pods = _pods(job, [0, 1])
    (view,) = views(_snapshot(job, pods[:1], _written(job, pods)), label_key=LABEL)
    assert (view.status, view.live, view.behind) == ("completed", "initializing", True)
    text = render.describe_text(view, label_key=LABEL, now=NOW)
    slots = table(section(text, "Members (rank order, as the controller sees them now):"))
    assert [(r["POD"], r["STATE"]) for r in slots] == [("j-worker-0", "counts"), ("<none>", "no pod")]
    assert "rank 1 (worker 1): no pod for this slot" in section(text, "Why it waits:")


def test_no_configmap_yet_is_absent_and_points_at_the_controller() -> None:
    job = _job()
    pods = _pods(job, [0, 1])
    (view,) = views(_snapshot(job, pods, None), label_key=LABEL)
    assert (view.status, view.live) == ("absent", "completed")
    assert table(render.get_table([view], now=NOW))[0]["AGE"] == "-"
    assert any("is ring-controller running" in h for h in render.advice(view, label_key=LABEL))


def test_a_foreign_configmap_makes_the_job_invalid_with_the_controllers_message() -> None:
    job = _job()
    pods = _pods(job, [0, 1])
    foreign = {"metadata": {"name": "rings-config-j", "namespace": "ns"}, "data": {"cluster.json": "{}"}}
    (view,) = views(_snapshot(job, pods, foreign), label_key=LABEL)
    assert view.status == "invalid" and [p.reason for p in view.problems] == ["foreign_configmap"]
    assert "without label ring-controller.io/managed=true" in render.describe_text(view, label_key=LABEL, now=NOW)
    assert any("delete it" in h for h in render.advice(view, label_key=LABEL))


def test_a_trainjob_and_its_jobset_are_one_job_served_by_the_trainjob() -> None:
    tj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "ns", "uid": "tj-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {"runtimeRef": {"name": "rt", "kind": "ClusterTrainingRuntime"}},
    }
    owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tj", "uid": "tj-uid"}
    js = jobset("tj", namespace="ns", replicated=[("node", 1, 3)], owner=owner, uid="js-uid")
    snapshot = Snapshot(workloads=(("trainjob", tj), ("jobset", js)), runtimes={"rt": 3})
    (view,) = views(snapshot, label_key=LABEL)
    assert (view.kind.short, view.workload.expected, view.status) == ("trainjob", 3, "absent")
    (missing,) = views(Snapshot(workloads=(("trainjob", tj),), runtimes={"rt": None}), label_key=LABEL)
    assert missing.status == "invalid" and "ClusterTrainingRuntime rt not found" in missing.problems[0].message


def test_every_reason_a_member_waits_has_advice() -> None:
    assert set(render.HINTS) == set(SLOT_STATES) == set(render.STATE_WORDS)
    assert all(render.HINTS[s] for s in SLOT_STATES if s not in COUNTS)


@pytest.mark.parametrize(
    ("ref", "found"),
    [("j", ["j"]), ("vcjob/j", ["j"]), ("Job/j", ["j"]), ("jobs/j", ["j"]), ("deploy/j", []), ("k", [])],
    ids=["name", "short", "kind", "plural", "other-kind", "other-name"],
)
def test_find_by_name_or_kind_and_name(ref: str, found: list[str]) -> None:
    job = _job()
    assert [v.workload.name for v in find(views(_snapshot(job, [], None), label_key=LABEL), ref)] == found


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (3 * 86400, "3d"),
    ],
)
def test_ages_read_like_kubectls(seconds: int, text: str) -> None:
    then = datetime.fromtimestamp(NOW.timestamp() - seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert age(then, now=NOW) == text
    assert age("", now=NOW) == "<unknown>"


def _launching(
    command: list[str], *, env: list[dict[str, str]] | None = None, mount: str = "/etc/ring-config"
) -> dict[str, Any]:
    template = pod_template(configmap="rings-config-j", command=command)
    container = template["spec"]["containers"][0]
    container["volumeMounts"][0]["mountPath"] = mount
    if env:
        container["env"] = env
    return template


@pytest.mark.parametrize(
    ("command", "env", "config_dir", "hostfile_dir"),
    [
        (["ring-launch", "--", "python", "t.py"], None, "/etc/ring-config", "/tmp/ring-launch"),
        (["/usr/bin/ring-launch", "--config-dir", "/cfg", "--hostfile-dir", "/h", "--", "x"], None, "/cfg", "/h"),
        (["sh", "-c", "ring-launch --config-dir /cfg -- python t.py"], None, "/cfg", "/tmp/ring-launch"),
        (
            ["ring-launch", "--", "x"],
            [{"name": "RING_CONFIG_DIR", "value": "/e"}, {"name": "TMPDIR", "value": "/t"}],
            "/e",
            "/t/ring-launch",
        ),
        (["python3", "/ring/ring-launch.pyz", "--config-dir", "/cfg", "--", "x"], None, "/cfg", "/tmp/ring-launch"),
        (["sh", "-c", "python3 /ring/ring-launch.pyz --config-dir /cfg -- x"], None, "/cfg", "/tmp/ring-launch"),
    ],
    ids=["defaults", "flags", "sh-c", "env", "pyz", "pyz-sh-c"],
)
def test_launch_setup_reads_the_pods_ring_launch_command_line(
    command: list[str], env: list[dict[str, str]] | None, config_dir: str, hostfile_dir: str
) -> None:
    pod = {"spec": _launching(command, env=env, mount=config_dir)["spec"]}
    setup = launch_setup(pod)
    assert (setup.config_dir, setup.hostfile_dir, setup.notes) == (config_dir, hostfile_dir, ())


def test_launch_setup_notes_a_volume_mounted_where_ring_launch_does_not_read() -> None:
    pod = {"spec": _launching(["ring-launch", "--", "x"], mount="/elsewhere")["spec"]}
    (note,) = launch_setup(pod).notes
    assert "mounted at /elsewhere but ring-launch reads /etc/ring-config" in note
    with pytest.raises(ValueError, match="no container 'sidecar'"):
        launch_setup(pod, container="sidecar")


def test_pod_env_is_what_ring_launch_prints_for_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("POD_NAME", "POD_UID", "POD_IP", "RING_CONFIG_DIR", "RING_HOSTFILE_DIR"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config"
    config.mkdir()
    job = _job(
        replicas=3,
        template=_launching(["ring-launch", "--config-dir", str(config), "--", "python", "t.py"], mount=str(config)),
    )
    pods = _pods(job, [0, 1, 2])
    cm = _written(job, pods)
    for key, value in cm["data"].items():
        (config / key).write_text(value, encoding="utf-8")
    hosts = tmp_path / "hosts"
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches its choice
    for pod in pods:
        pod["spec"]["containers"][0]["env"] = [{"name": "RING_HOSTFILE_DIR", "value": str(hosts)}]
        result = pod_env(pod, cm, where="ConfigMap ns/rings-config-j")
        assert result.env is not None and result.setup.notes == ()
        name = pod["metadata"]["name"]
        code = launcher.main(
            [
                "--config-dir",
                str(config),
                "--pod",
                name,
                "--hostfile-dir",
                str(hosts),
                "--timeout",
                "1",
                "--print",
                "json",
            ]
        )
        assert code == 0
        assert json.loads(capsys.readouterr().out) == result.env
        assert json.loads(result.env["TF_CONFIG"])["task"] == {"type": "worker", "index": int(name[-1])}


def test_pod_env_while_waiting_and_for_a_pod_the_spec_does_not_list() -> None:
    job = _job()
    pods = _pods(job, [0, 1])
    waiting = _written(job, pods[:1])
    result = pod_env(pods[0], waiting, where="ConfigMap ns/rings-config-j")
    assert result.env is None and result.waiting == "spec initializing: epoch 0, members 0/2"
    stranger = _pods(_job("other"), [0])[0]
    with pytest.raises(PodNotInSpec, match="^pod 'other-worker-0' is not in the cluster spec"):
        pod_env(stranger, _written(job, pods), where="ConfigMap ns/rings-config-j")


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["--help"], 0), ([], 2), (["frobnicate"], 2), (["get", "-A", "-n", "x"], 2), (["get", "-o", "xml"], 2)],
    ids=["help", "no-command", "unknown-command", "all-and-namespace", "bad-output"],
)
def test_usage_errors_exit_2(argv: list[str], code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == code
    captured = capsys.readouterr()
    if code == 0:
        assert "kubectl ring get" in captured.out and "exit codes" in captured.out
    else:
        assert "Traceback" not in captured.err and captured.err


def test_a_missing_kubeconfig_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["get", "--kubeconfig", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot load the kubeconfig") and len(err.splitlines()) == 1


def test_a_topology_ordered_job_reads_with_its_nodes_and_shows_rule_and_paths() -> None:
    from model.keys import RANK_ORDER_ANNOTATION
    from model.topology import RankOrder

    rack = "cloud.provider.com/topology-rack"
    job = _job(replicas=3)
    job["metadata"]["annotations"] = {RANK_ORDER_ANNOTATION: "topology"}
    pods = [dict(p, spec=dict(p["spec"], nodeName=f"n{i}")) for i, p in enumerate(_pods(job, [0, 1, 2]))]
    nodes = tuple({"metadata": {"name": f"n{i}", "labels": {rack: f"r{(i + 1) % 2}"}}} for i in range(3))
    paths = {f"n{i}": ("", f"r{(i + 1) % 2}", f"n{i}") for i in range(3)}
    order = RankOrder(keys=("zone", rack, "kubernetes.io/hostname"), node_path=paths.get)
    wl = workload_record(job, label_key=LABEL)
    decision = decide(wl, [pod_record(p) for p in pods], previous=None, order=order)
    assert decision.data is not None
    cm = configmap_body(namespace="ns", name=wl.configmap, job=wl.key, owner=wl.owner_reference(), data=decision.data)
    snapshot = Snapshot(
        workloads=(("vcjob", job),), pods=tuple(pods), configmaps={f"ns/{wl.configmap}": cm}, nodes=nodes
    )
    (view,) = views(snapshot, label_key=LABEL, order=RankOrder(keys=order.keys))
    assert (view.status, view.behind, view.rank_rule) == ("completed", False, "topology")
    text = render.describe_text(view, label_key=LABEL, now=NOW)
    rows = table(section(text, "Members (rank order):"))
    # n1 is in rack r0, n0 and n2 in r1
    assert [(r["RANK"], r["NODE"], r["TOPOLOGY"]) for r in rows] == [
        ("0", "n1", "r0/n1"),
        ("1", "n0", "r1/n0"),
        ("2", "n2", "r1/n2"),
    ]
    assert f"annotation {RANK_ORDER_ANNOTATION}" in text and "topology (the nodes' topology path" in text
    # without the nodes (no permission): the same pods keep the written ranks, nothing reads as behind
    (blind,) = views(
        Snapshot(workloads=(("vcjob", job),), pods=tuple(pods), configmaps={f"ns/{wl.configmap}": cm}),
        label_key=LABEL,
        order=RankOrder(keys=order.keys),
    )
    assert not blind.behind and blind.explanation.decision.spec.members == view.written.members  # type: ignore[union-attr]


def test_indexed_jobs_and_statefulsets_are_listed_and_a_short_name_tells_job_from_vcjob() -> None:
    vc = _job("train")
    ij = indexed_job("train", 2, namespace="ns", uid="ij-uid")
    sts = statefulset("web", 2, namespace="ns", uid="sts-uid")
    pods = [job_pod(ij, index=i, ip=f"127.1.1.{i + 1}", phase="Running") for i in (1, 0)]
    pods += [statefulset_pod(sts, ordinal=o, ip=f"127.1.2.{o + 1}", phase="Running") for o in (0, 1)]
    snapshot = Snapshot(workloads=(("vcjob", vc), ("job", ij), ("sts", sts)), pods=tuple(pods))
    found = views(snapshot, label_key=LABEL)
    assert [(v.kind.short, v.workload.name, v.live, v.ready) for v in found] == [
        ("job", "train", "completed", 2),
        ("sts", "web", "completed", 2),
        ("vcjob", "train", "initializing", 0),
    ]
    assert [v.kind.short for v in find(found, "job/train")] == ["job"]
    assert [v.kind.short for v in find(found, "vcjob/train")] == ["vcjob"]
    assert [v.kind.short for v in find(found, "Job/train")] == ["job"]  # the short name, in any case
    assert sorted(v.kind.short for v in find(found, "jobs/train")) == ["job", "vcjob"]  # the plural: both
    assert [v.kind.short for v in find(found, "statefulset/web")] == ["sts"]
    rows = table(render.get_table(found, now=NOW))
    assert [(r["KIND"], r["NAME"], r["READY"]) for r in rows] == [
        ("job", "train", "2/2"),
        ("sts", "web", "2/2"),
        ("vcjob", "train", "0/2"),
    ]
    text = render.describe_text(found[0], label_key=LABEL, now=NOW)
    assert "Kind:" in text and "Job (batch/v1), job/train" in text


def test_describe_says_a_suspended_job_waits_for_its_resumption() -> None:
    ij = indexed_job("train", 2, namespace="ns", uid="ij-uid")
    ij["spec"]["suspend"] = True
    (view,) = views(Snapshot(workloads=(("job", ij),)), label_key=LABEL)
    why = section(render.describe_text(view, label_key=LABEL, now=NOW), "Why it waits:")
    assert why.splitlines()[0].strip().startswith("the Job is suspended (spec.suspend)")


def test_describe_shows_a_duplicate_index_and_a_missing_ordinal() -> None:
    ij = indexed_job("train", 2, namespace="ns", uid="ij-uid")
    pods = [job_pod(ij, index=i, ip=f"127.1.1.{i + 1}", phase="Running") for i in (0, 1)]
    pods.append(job_pod(ij, index=1, suffix="byhand", ip="127.1.1.9", phase="Running"))
    (view,) = views(Snapshot(workloads=(("job", ij),), pods=tuple(pods)), label_key=LABEL)
    text = render.describe_text(view, label_key=LABEL, now=NOW)
    slots = table(section(text, "Members (rank order, as the controller sees them now):"))
    assert [r["STATE"] for r in slots] == ["counts", "duplicate index"]
    assert "pods train-1-byhand, train-1-x1z all claim worker index 1" in section(text, "Why it waits:")
    assert any("Several live pods claim one slot (train-1-x1z)" in h for h in render.advice(view, label_key=LABEL))
    sts = statefulset("web", 1, namespace="ns", uid="sts-uid")
    bare = statefulset_pod(sts, ordinal=0, ip="127.1.2.1", phase="Running", index_label=False)
    (old,) = views(Snapshot(workloads=(("sts", sts),), pods=(bare,)), label_key=LABEL)
    text = render.describe_text(old, label_key=LABEL, now=NOW)
    assert "pods carry no member index (label apps.kubernetes.io/pod-index)" in section(text, "Why it waits:")
    assert "web-0: carries no member index (label apps.kubernetes.io/pod-index)" in text
    assert any("Pods without their member index" in h for h in render.advice(old, label_key=LABEL))


def test_a_leaderworkerset_shows_one_job_per_group() -> None:
    from tests.support.factories import leader_worker_set, lws_pod

    raw = leader_worker_set("llm", replicas=2, size=2, namespace="ns", uid="lws-uid")
    pods = [lws_pod(raw, group=1, worker=w, ip=f"127.1.3.{w + 1}", phase="Running") for w in (0, 1)]
    found = views(Snapshot(workloads=(("lws", raw),), pods=tuple(pods)), label_key=LABEL)
    rows = table(render.get_table(found, now=NOW))
    assert [(r["KIND"], r["NAME"], r["READY"], r["CONFIGMAP"]) for r in rows] == [
        ("lws", "llm-0", "0/2", "rings-config-llm-0"),
        ("lws", "llm-1", "2/2", "rings-config-llm-1"),
    ]
    assert [v.workload.job_name for v in find(found, "lws/llm")] == ["llm-0", "llm-1"]
    (one,) = find(found, "lws/llm-1")
    text = render.describe_text(one, label_key=LABEL, now=NOW)
    assert "llm-1 (group 1 of LeaderWorkerSet llm)" in text and "lws/llm-1" in text


def test_a_podgroup_is_a_job_whose_members_are_the_pods_naming_it_and_its_bad_ranks_have_advice() -> None:
    from tests.support.factories import group_pod, pod_group

    group = pod_group("gang", 2, namespace="ns", uid="pg-uid")
    ij = indexed_job("train", 1, namespace="ns", uid="ij-uid")
    # A pod of a served Indexed Job in the group too: it counts for both jobs.
    in_both = job_pod(ij, index=0, ip="127.1.4.9", phase="Running")
    in_both["spec"]["schedulingGroup"] = {"podGroupName": "gang"}
    pods = [group_pod("gang", "b", rank=5, namespace="ns", ip="127.1.4.2", phase="Running"), in_both]
    found = views(Snapshot(workloads=(("pg", group), ("job", ij)), pods=tuple(pods)), label_key=LABEL)
    rows = table(render.get_table(found, now=NOW))
    assert [(r["KIND"], r["NAME"], r["READY"], r["CONFIGMAP"]) for r in rows] == [
        ("job", "train", "1/1", "rings-config-train"),
        ("pg", "gang", "1/2", "rings-config-gang"),
    ]
    (view,) = find(found, "pg/gang")
    text = render.describe_text(view, label_key=LABEL, now=NOW)
    assert "PodGroup (scheduling.k8s.io/v1beta1), pg/gang" in text
    assert "pods with an index beyond fill no slot: b (index 5)" in section(text, "Why it waits:")
    assert any("ring-controller.io/rank annotation" in h for h in render.advice(view, label_key=LABEL))
