"""What the API server is, read at start-up: its version against the floor, the optional APIs it lacks.

The dev cluster (whatever Kubernetes release it runs: ``ring-devcluster up
--kube VERSION``) has no Volcano HyperNode CRD: the controller says so in one
line, shows it as ``ringcontroller_api_available{api="hypernodes"} 0``, and
a job ranked by topology still gets its complete spec from node labels
alone. The version it logs is the one the server's ``/version`` reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from ringcontroller.serverinfo import MIN_VERSION, parse_version
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import volcano_job
from tests.support.kubehelp import all_members, create_pods, create_volcano_job, wait_for, wait_spec

pytestmark = pytest.mark.integration


def _events(controller: ControllerProcess, event: str) -> list[dict[str, Any]]:
    found = []
    for line in controller.log_lines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == event:
            found.append(record)
    return found


@pytest.fixture
def topology_controller(kubeconfig: Path, namespace: str, tmp_path: Path) -> Any:
    proc = ControllerProcess(
        kubeconfig=str(kubeconfig),
        namespace=namespace,
        log_path=tmp_path / "controller.log",
        extra=["--rank-order", "topology", "--self-registration"],
    )
    proc.start()
    yield proc
    code = proc.stop()
    print(f"controller exit code {code}; log tail:\n{proc.log_tail(20)}")


def test_the_server_version_is_logged_against_the_floor(k8s: Any, topology_controller: ControllerProcess) -> None:
    served = parse_version(_raw_version(k8s))
    assert served is not None and served.supported
    lines = wait_for(lambda: _events(topology_controller, "server.version"), what="the server.version line")
    assert lines[0]["found"].startswith(f"{served.major}.{served.minor} ")
    assert lines[0]["need"] == ".".join(map(str, MIN_VERSION))


def _raw_version(k8s: Any) -> dict[str, Any]:
    # The generated model drops fields it does not know (emulationMajor/Minor): read the body as sent.
    body = json.loads(client.VersionApi(k8s.api).get_code(_preload_content=False).data)
    assert isinstance(body, dict)
    return body


def test_a_missing_hypernode_crd_turns_off_only_hypernode_paths(
    k8s: Any, namespace: str, topology_controller: ControllerProcess
) -> None:
    lines = wait_for(
        lambda: [r for r in _events(topology_controller, "api.unavailable") if "hypernodes" in r["api"]],
        what="the api.unavailable line for HyperNodes",
    )
    assert lines[0]["api"] == "hypernodes.topology.volcano.sh/v1alpha1"
    assert "HyperNode" in lines[0]["off"] and "restart" in lines[0]["hint"]
    assert topology_controller.metric("ringcontroller_api_available", api="hypernodes") == 0
    # Served on every supported release (GA since 1.30): self-registration stays on.
    assert topology_controller.metric("ringcontroller_api_available", api="validatingadmissionpolicies") == 1
    assert not [r for r in _events(topology_controller, "api.unavailable") if "admissionpolic" in r["api"]]
    # The rest works: a job ranked by topology (node labels only) gets its complete spec.
    job = create_volcano_job(k8s, namespace, volcano_job("topo", tasks=[("worker", 2)]))
    create_pods(k8s, job, all_members(job))
    assert len(wait_spec(k8s, namespace, "rings-config-topo")["members"]) == 2
    assert topology_controller.proc is not None and topology_controller.proc.poll() is None


def test_podgroups_are_watched_only_where_the_server_serves_them(
    k8s: Any, namespace: str, topology_controller: ControllerProcess
) -> None:
    # The default cluster (1.35) lacks scheduling.k8s.io/v1beta1; a 1.37 one of the matrix serves it.
    try:
        k8s.custom.list_namespaced_custom_object("scheduling.k8s.io", "v1beta1", namespace, "podgroups")
        served = True
    except client.ApiException as err:
        assert err.status == 404, err
        served = False
    lines = [r for r in _events(topology_controller, "api.unavailable") if "podgroups" in r["api"]]
    assert topology_controller.metric("ringcontroller_api_available", api="podgroups") == (1 if served else 0)
    if not served:
        assert lines[0]["api"] == "podgroups.scheduling.k8s.io/v1beta1"
        assert "PodGroups" in lines[0]["off"] and "--runtime-config=scheduling.k8s.io/v1beta1=true" in lines[0]["hint"]
    else:
        assert lines == []
    # Never the kind.unavailable warning of a missing CRD: the api line says it all.
    assert not [r for r in _events(topology_controller, "kind.unavailable") if r.get("kind") == "PodGroup"]
    # The other kinds are served: a Volcano Job completes.
    job = create_volcano_job(k8s, namespace, volcano_job("other", tasks=[("worker", 2)]))
    create_pods(k8s, job, all_members(job))
    assert len(wait_spec(k8s, namespace, "rings-config-other")["members"]) == 2
