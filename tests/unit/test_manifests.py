"""The shipped deployment files: they parse, lock the pod down, grant least
privilege, and name only metrics and flags the daemon really has.

The same manifests are applied to the real control plane (RBAC enforced, the
Deployment server-side dry-run) in ``tests/integration/test_operations.py``.
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
from prometheus_client import CollectorRegistry

from agent.decide import JOB_STATUSES
from agent.metrics import AgentMetrics
from model.keys import EPOCH_ANNOTATION
from model.kinds import KINDS
from ringcontroller.metrics import (
    ClientMetrics,
    LeaderMetrics,
    ReconcileMetrics,
    SpecMetrics,
    WorkqueueMetrics,
)
from ringcontroller.options import parse

BUILD = Path(__file__).resolve().parents[2] / "build"
Json = dict[str, Any]


def docs(name: str) -> list[Json]:
    with open(BUILD / name) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def one(documents: list[Json], kind: str) -> Json:
    found = [d for d in documents if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def deploy_docs() -> list[Json]:
    return docs("ring-controller.yaml")


@pytest.fixture(scope="module")
def deployment(deploy_docs: list[Json]) -> Json:
    return one(deploy_docs, "Deployment")


@pytest.fixture(scope="module")
def container(deployment: Json) -> Json:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def rbac() -> list[Json]:
    return docs("rbac.yaml")


@pytest.mark.parametrize("name", ["ring-controller.yaml", "rbac.yaml", "monitoring.yaml"])
def test_every_manifest_parses_with_kind_and_name(name: str) -> None:
    documents = docs(name)
    assert documents
    for d in documents:
        assert d["apiVersion"] and d["kind"] and d["metadata"]["name"], d


class TestDeployment:
    def test_two_replicas_with_leader_election(self, deployment: Json, container: Json) -> None:
        assert deployment["spec"]["replicas"] == 2
        assert "--leader-elect" in container["args"]

    def test_args_are_flags_the_daemon_accepts(self, deployment: Json, container: Json) -> None:
        options = parse(container["args"])
        assert options.leader_elect
        assert options.log_format == "json"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert options.metrics_bind_address == f":{ports['metrics']}"
        assert options.health_probe_bind_address == f":{ports['health']}"
        # The drain and the release must fit in the kubelet's grace period.
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert options.shutdown_timeout + 5 < grace

    def test_probes_use_healthz_and_readyz_on_the_health_port(self, container: Json) -> None:
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}

    def test_resources_are_bounded(self, container: Json) -> None:
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"])
        assert "memory" in resources["limits"]

    def test_pod_is_locked_down(self, deployment: Json, container: Json) -> None:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        sc = container["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert "add" not in sc["capabilities"]
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not pod.get("hostNetwork") and not pod.get("hostPID")

    def test_identity_and_namespace_from_the_downward_api(self, container: Json) -> None:
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
        assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}

    def test_service_account_and_namespace_exist(self, deploy_docs: list[Json], deployment: Json) -> None:
        namespace = one(deploy_docs, "Namespace")["metadata"]["name"]
        account = one(deploy_docs, "ServiceAccount")
        assert deployment["metadata"]["namespace"] == account["metadata"]["namespace"] == namespace
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]

    def test_selector_matches_pod_labels(self, deployment: Json) -> None:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def rules_for(rules: list[Json], group: str, resource: str) -> set[str]:
    verbs: set[str] = set()
    for rule in rules:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            verbs |= set(rule["verbs"])
    return verbs


class TestRbac:
    def test_no_wildcards_and_no_secrets(self, rbac: list[Json]) -> None:
        for role in (d for d in rbac if d["kind"] in ("ClusterRole", "Role")):
            for rule in role["rules"]:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
                assert "secrets" not in rule["resources"]
                assert (
                    "escalate" not in rule["verbs"]
                    and "bind" not in rule["verbs"]
                    and "impersonate" not in rule["verbs"]
                )

    def test_cluster_role_grants_exactly_what_the_controller_uses(self, rbac: list[Json]) -> None:
        rules = one(rbac, "ClusterRole")["rules"]
        read = {"get", "list", "watch"}
        assert rules_for(rules, "", "pods") == read | {"patch"}  # patch: the epoch annotation (--touch-pods)
        for group, resource in [
            ("batch.volcano.sh", "jobs"), ("jobset.x-k8s.io", "jobsets"),
            ("trainer.kubeflow.org", "trainjobs"), ("trainer.kubeflow.org", "clustertrainingruntimes"), ("apps", "deployments"),
            ("apps", "statefulsets"), ("batch", "jobs"), ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ]:  # fmt: skip
            assert rules_for(rules, group, resource) == read, (group, resource)
        assert rules_for(rules, "scheduling.k8s.io", "podgroups") == {"list", "watch"}  # informer only
        assert rules_for(rules, "", "nodes") == read  # topology rank order: node labels
        assert rules_for(rules, "topology.volcano.sh", "hypernodes") == read
        assert rules_for(rules, "resource.k8s.io", "resourceclaims") == read  # DRA NICs (network-claim)
        assert rules_for(rules, "", "configmaps") == {"get", "list", "watch", "create", "update", "patch"}
        assert rules_for(rules, "", "events") == {"create", "patch"}
        assert rules_for(rules, "events.k8s.io", "events") == {"create", "patch"}
        assert rules_for(rules, "coordination.k8s.io", "leases") == set()
        granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
        assert granted == {
            ("", "pods"), ("", "nodes"), ("topology.volcano.sh", "hypernodes"), ("batch.volcano.sh", "jobs"), ("jobset.x-k8s.io", "jobsets"),
            ("trainer.kubeflow.org", "trainjobs"), ("trainer.kubeflow.org", "clustertrainingruntimes"), ("apps", "deployments"), ("", "configmaps"),
            ("", "events"), ("events.k8s.io", "events"), ("apps", "statefulsets"), ("batch", "jobs"),
            ("leaderworkerset.x-k8s.io", "leaderworkersets"),
            ("resource.k8s.io", "resourceclaims"), ("scheduling.k8s.io", "podgroups"),
        }  # fmt: skip

    def test_every_watched_kind_is_readable(self, rbac: list[Json]) -> None:
        rules = one(rbac, "ClusterRole")["rules"]
        for kind in KINDS:
            assert {"list", "watch"} <= rules_for(rules, kind.group, kind.plural), kind.kind

    def test_lease_role_is_namespaced_to_the_controller_and_its_lease(
        self, rbac: list[Json], deployment: Json, container: Json
    ) -> None:
        role = one(rbac, "Role")
        assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]
        lease_id = parse(container["args"]).leader_election_id
        named = [r for r in role["rules"] if r.get("resourceNames")]
        assert named and all(r["resourceNames"] == [lease_id] for r in named)
        assert rules_for(named, "coordination.k8s.io", "leases") == {"get", "update"}
        assert rules_for(role["rules"], "coordination.k8s.io", "leases") == {"get", "update", "create"}

    def test_bindings_name_the_shipped_service_account(self, rbac: list[Json], deploy_docs: list[Json]) -> None:
        account = one(deploy_docs, "ServiceAccount")["metadata"]
        roles = {(d["kind"], d["metadata"]["name"]) for d in rbac if d["kind"] in ("ClusterRole", "Role")}
        for binding in (d for d in rbac if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
            assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
            ]

    def test_pod_patch_is_fenced_by_a_policy_naming_the_shipped_account(
        self, rbac: list[Json], deploy_docs: list[Json]
    ) -> None:
        account = one(deploy_docs, "ServiceAccount")["metadata"]
        policy = one(rbac, "ValidatingAdmissionPolicy")
        binding = one(rbac, "ValidatingAdmissionPolicyBinding")
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert policy["spec"]["failurePolicy"] == "Fail"
        (condition,) = policy["spec"]["matchConditions"]
        assert f'"system:serviceaccount:{account["namespace"]}:{account["name"]}"' in condition["expression"]
        (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
        assert rule["resources"] == ["pods", "pods/*"] and rule["operations"] == ["UPDATE"]
        assert f"'{EPOCH_ANNOTATION}'" in policy["spec"]["variables"][0]["expression"]


def exported_names() -> set[str]:
    """Every sample name the daemon can export (counters with _total, histograms with their series)."""
    registry = CollectorRegistry()
    for group in (WorkqueueMetrics, ClientMetrics, ReconcileMetrics, LeaderMetrics, SpecMetrics, AgentMetrics):
        group(registry)
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


METRIC_NAME = re.compile(r"\b((?:ringcontroller|controller_runtime|workqueue|leader_election)_[a-z_]+)\b")


def test_alerts_and_dashboard_use_only_exported_metrics(deployment: Json) -> None:
    exported = exported_names()
    monitoring = docs("monitoring.yaml")
    rules = one(monitoring, "PrometheusRule")["spec"]["groups"][0]["rules"]
    dashboard = json.loads((BUILD / "grafana-dashboard.json").read_text())
    exprs = [r["expr"] for r in rules] + [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert used, "no metric referenced"
    assert used <= exported, used - exported
    assert {r["alert"] for r in rules} >= {
        "RingControllerSpecIncomplete",
        "RingControllerDown",
        "RingControllerNoLeader",
    }
    assert all(r["labels"]["severity"] in ("warning", "critical") for r in rules)


def test_every_job_status_the_alerts_read_is_exported_before_any_job_has_it() -> None:
    """``ringcontroller_jobs{status="invalid"}`` must exist at 0 on a healthy replica, not appear on the first one."""
    registry = CollectorRegistry()
    AgentMetrics(registry)
    statuses = {s.labels["status"] for s in registry.collect() if s.name == "ringcontroller_jobs" for s in s.samples}
    assert statuses == set(JOB_STATUSES) == {"initializing", "completed", "invalid"}


def test_pod_monitor_scrapes_the_deployments_metrics_port(deployment: Json, container: Json) -> None:
    monitor = one(docs("monitoring.yaml"), "PodMonitor")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [deployment["metadata"]["namespace"]]
    ports = {p["name"] for p in container["ports"]}
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    assert "metrics" in ports


def test_dashboard_panels_have_unique_ids_and_queries() -> None:
    dashboard = json.loads((BUILD / "grafana-dashboard.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p.get("targets") for p in dashboard["panels"] if p["type"] != "row")


def test_dockerfile_runs_as_non_root_without_network_at_runtime() -> None:
    text = (BUILD / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2
    # Wheels are downloaded in a Python stage; the image is Debian slim with Debian's python3.
    assert stages[0].splitlines()[0].startswith("${PYTHON_IMAGE}")
    assert stages[-1].splitlines()[0] == "${DEBIAN_IMAGE}"
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim", text, re.M)
    assert re.search(r"^ARG DEBIAN_IMAGE=debian:bookworm-slim$", text, re.M)
    runtime = stages[-1]
    user = re.search(r"^USER (\d+)(?::(\d+))?$", runtime, re.M)
    assert user and int(user.group(1)) != 0
    assert re.search(r'^ENTRYPOINT \["ring-controller"\]$', runtime, re.M)
    install = [line for line in runtime.splitlines() if "pip install" in line]
    assert install and all("--no-index" in line for line in install)


def test_build_script_is_valid_bash_and_executable() -> None:
    script = BUILD / "build.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
