"""Workload and pod models on plain JSON."""

from __future__ import annotations

import pytest

from model.configmap import configmap_body, configmap_record
from model.keys import DEFAULT_PORT
from model.pod import pod_record
from model.template import member_port
from model.volcano import workload_record
from tests.support.factories import pod_template, volcano_job, volcano_pod

LABEL = "ring-controller.atlas"


def test_volcano_job_tasks_in_spec_order() -> None:
    job = volcano_job("mnist", tasks=[("chief", 1), ("worker", 3)], uid="u1", version=2)
    rec = workload_record(job, label_key=LABEL)
    assert [(t.name, t.replicas) for t in rec.tasks] == [("chief", 1), ("worker", 3)]
    assert rec.expected == 4
    assert rec.version == 2
    assert rec.key == "vcjob/default/mnist"
    assert rec.configmap == "rings-config-mnist"
    assert rec.runtime == "tensorflow"
    assert rec.error is None
    assert not rec.wants_devices


def test_volcano_job_configmap_from_volume_and_devices_from_npu_request() -> None:
    tpl = pod_template(configmap="my-rings", npus=2)
    rec = workload_record(volcano_job("npu", template=tpl), label_key=LABEL)
    assert rec.configmap == "my-rings"
    assert rec.wants_devices


@pytest.mark.parametrize(
    "tasks, error",
    [
        pytest.param([], "spec.tasks is empty", id="no-tasks"),
        pytest.param([{"name": "a", "replicas": "2"}], "replicas '2'", id="string-replicas"),
        pytest.param([{"name": "a", "replicas": -1}], "replicas -1", id="negative-replicas"),
        pytest.param([{"name": "a", "replicas": 1}, {"name": "a", "replicas": 1}], "not unique", id="duplicate-task"),
    ],
)
def test_volcano_job_malformed(tasks: list[dict[str, object]], error: str) -> None:
    job = volcano_job("bad")
    job["spec"]["tasks"] = tasks
    rec = workload_record(job, label_key=LABEL)
    assert rec.error is not None and error in rec.error


def test_volcano_pod_identity_from_labels() -> None:
    job = volcano_job("mnist", tasks=[("chief", 1), ("worker", 3)], uid="job-uid")
    pod = pod_record(volcano_pod(job, task="worker", index=2, version=1, ip="127.1.0.9", phase="Running"))
    assert pod.job == "vcjob/default/mnist"
    assert (pod.task, pod.index, pod.version, pod.owner_uid) == ("worker", 2, 1, "job-uid")
    assert pod.ready


def test_volcano_pod_identity_from_name_when_index_label_missing() -> None:
    """Older Volcano releases set no task-index: the name suffix gives it."""
    job = volcano_job("my-job", tasks=[("ps-0", 1), ("worker", 3)])
    raw = volcano_pod(job, task="worker", index=1)
    del raw["metadata"]["labels"]["volcano.sh/task-index"]
    del raw["metadata"]["annotations"]["volcano.sh/task-index"]
    assert pod_record(raw).index == 1
    del raw["metadata"]["labels"]["volcano.sh/task-spec"]
    del raw["metadata"]["annotations"]["volcano.sh/task-spec"]
    rec = pod_record(raw)
    assert (rec.task, rec.index) == ("worker", 1)


def test_pod_record_lists_the_configmaps_its_volumes_mount() -> None:
    spec = {
        "volumes": [
            {"name": "rings-config", "configMap": {"name": "rings-config-j"}},
            {"name": "both", "projected": {"sources": [{"configMap": {"name": "b"}}, {"secret": {"name": "s"}}]}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "again", "configMap": {"name": "b"}},
        ]
    }
    assert pod_record({"metadata": {"name": "p"}, "spec": spec}).mounts == ("b", "rings-config-j")
    assert pod_record({"metadata": {"name": "p"}, "spec": {}}).mounts == ()


def test_unclaimed_pod_has_no_job() -> None:
    rec = pod_record({"metadata": {"name": "p", "namespace": "x", "labels": {LABEL: "tensorflow"}}})
    assert rec.job is None


@pytest.mark.parametrize(
    "container, annotations, port, error",
    [
        pytest.param({"ports": [{"name": "tf-port", "containerPort": 3000}]}, {}, 3000, None, id="named-port"),
        pytest.param({"ports": [{"name": "tfjob-port", "containerPort": 3001}]}, {}, 3001, None, id="tfjob-port"),
        pytest.param(
            {"ports": [{"name": "tf-port", "containerPort": 3000}], "env": [{"name": "TF_WORKER_PORT", "value": "9"}]},
            {"ring-controller/port": "5000"},
            3000,
            None,
            id="named-port-beats-annotation-and-env",
        ),
        pytest.param(
            {"env": [{"name": "TF_WORKER_PORT", "value": "9"}]},
            {"ring-controller/port": "5000"},
            5000,
            None,
            id="annotation-beats-env",
        ),
        pytest.param({"env": [{"name": "TF_WORKER_PORT", "value": "2345"}]}, {}, 2345, None, id="env"),
        pytest.param({}, {}, DEFAULT_PORT, None, id="default"),
        pytest.param({}, {"ring-controller/port": "http"}, DEFAULT_PORT, "not an integer", id="bad-annotation"),
        pytest.param({}, {"ring-controller/port": "70000"}, DEFAULT_PORT, "outside 1-65535", id="port-out-of-range"),
        pytest.param(
            {"env": [{"name": "TF_WORKER_PORT", "value": "x"}]}, {}, DEFAULT_PORT, "TF_WORKER_PORT", id="bad-env"
        ),
    ],
)
def test_member_port_rule(
    container: dict[str, object], annotations: dict[str, str], port: int, error: str | None
) -> None:
    got, err = member_port({"containers": [{"name": "c", **container}]}, annotations)
    assert got == port
    if error is None:
        assert err is None
    else:
        assert err is not None and error in err


def test_configmap_body_round_trips_to_a_managed_record() -> None:
    body = configmap_body(
        namespace="ns",
        name="rings-config-x",
        job="vcjob/ns/x",  # type: ignore[arg-type]
        owner={"kind": "Job", "uid": "u"},
        data={"cluster.json": "{}"},
        resource_version="7",
    )
    body["metadata"]["uid"] = "cm-uid"
    rec = configmap_record(body)
    assert rec.managed and rec.job == "vcjob/ns/x" and rec.resource_version == "7"
    body["metadata"]["labels"] = {}
    assert not configmap_record(body).managed
