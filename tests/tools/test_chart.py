"""The Helm chart (build/chart/ring-controller) and the kustomize base (build/kustomization.yaml),
rendered offline by the real helm and kubectl, against the shipped manifests.

One source of truth: the chart's defaults must render the objects of
build/ring-controller.yaml and build/rbac.yaml (the Namespace aside: Helm
leaves it to ``--create-namespace``), compared as parsed objects after
dropping Helm's bookkeeping labels. The monitoring objects and the dashboard
are read by the chart from copies of build/monitoring.yaml and
build/grafana-dashboard.json, which must equal them byte for byte. A change to
a shipped file that the chart does not follow fails here (the byte-for-byte
copies, the chart's version and its values' schema are plain files, checked
without helm in tests/unit/test_chart_files.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringcontroller.options import parse
from tests.support import charts
from tests.support.charts import CHART, Json, by_identity, shipped, template, without_helm_labels

pytestmark = pytest.mark.tools

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "Namespace",
    "FlowSchema",
}


def _objects(docs: list[Json]) -> dict[tuple[str, str, str], Json]:
    return by_identity(without_helm_labels(d) for d in docs)


def _one(docs: list[Json], kind: str) -> Json:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def _grants(rules: list[Json]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every rule, flattened."""
    return {(g, r, v) for x in rules for g in x["apiGroups"] for r in x["resources"] for v in x["verbs"]}


def _args(docs: list[Json]) -> list[str]:
    (container,) = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


# -- one source of truth ---------------------------------------------------------


def test_defaults_render_the_shipped_objects_but_the_namespace() -> None:
    expected = _objects([d for d in shipped(*charts.SHIPPED) if d["kind"] != "Namespace"])
    rendered = _objects(template())
    assert sorted(rendered) == sorted(expected)
    for key, doc in expected.items():
        assert rendered[key] == doc, f"{key} differs from build/*.yaml"


def test_monitoring_on_renders_build_monitoring_yaml() -> None:
    docs = template({"podMonitor": {"enabled": True}, "alertRules": {"enabled": True}})
    expected = _objects(shipped("monitoring.yaml"))
    rendered = _objects([d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")])
    assert sorted(rendered) == sorted(expected)
    for key, doc in expected.items():
        assert rendered[key] == doc


def test_monitoring_follows_the_release_and_takes_extra_labels() -> None:
    docs = template(
        {"podMonitor": {"enabled": True, "labels": {"release": "stack"}}, "alertRules": {"enabled": True}},
        release="ops",
        namespace="ml-system",
    )
    monitor, rule = _one(docs, "PodMonitor"), _one(docs, "PrometheusRule")
    assert monitor["metadata"]["namespace"] == rule["metadata"]["namespace"] == "ml-system"
    assert monitor["metadata"]["name"] == rule["metadata"]["name"] == "ops-ring-controller"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ml-system"]}
    assert monitor["metadata"]["labels"]["release"] == "stack" and "release" not in rule["metadata"]["labels"]
    # The pods it selects are the Deployment's, whatever the release.
    pod_labels = _one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pod_labels[monitor["spec"]["jobLabel"]] == "ring-controller"  # the alerts' job="ring-controller"
    # Each switch alone.
    only_rules = template({"alertRules": {"enabled": True}})
    assert [d["kind"] for d in only_rules if "monitoring" in d["apiVersion"]] == ["PrometheusRule"]


def test_dashboard_configmap_holds_the_shipped_dashboard() -> None:
    assert not [d for d in template() if d["kind"] == "ConfigMap"]
    docs = template({"grafanaDashboard": {"enabled": True, "namespace": "grafana"}})
    cm = _one(docs, "ConfigMap")
    assert cm["metadata"]["namespace"] == "grafana" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped_dashboard = json.loads((charts.REPO / "build" / "grafana-dashboard.json").read_text())
    assert json.loads(cm["data"]["ring-controller.json"]) == shipped_dashboard


# -- lint and values ---------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"watchNamespaces": ["a", "b"], "podMonitor": {"enabled": True}, "alertRules": {"enabled": True}},
        {"grafanaDashboard": {"enabled": True}, "replicas": 1, "leaderElection": {"enabled": False}},
    ],
    ids=["defaults", "namespaced-monitoring", "dashboard-single"],
)
def test_helm_lint_is_clean(values: dict[str, Any]) -> None:
    proc = charts.run([charts.tool("helm"), "lint", "--strict", CHART, *charts.helm_args(values)])
    out = proc.stdout + proc.stderr
    assert "0 chart(s) failed" in out and "[WARNING]" not in out and "[ERROR]" not in out, out


def test_watched_namespaces_give_roles_in_each_and_no_cluster_wide_write() -> None:
    docs = template({"watchNamespaces": ["team-a", "team-b"]})
    roles = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Role"}
    assert roles == {
        ("team-a", "ring-controller"),
        ("team-b", "ring-controller"),
        ("ring-controller", "ring-controller-leader-election"),
    }
    for ns in ("team-a", "team-b"):
        (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == ns]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "ring-controller",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "ring-controller", "namespace": "ring-controller"}
        ]
    # A Role grants what the cluster-wide ClusterRole grants on namespaced resources.
    cluster_role = _one(template(), "ClusterRole")
    role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["namespace"] == "team-a")
    assert _grants(cluster_role["rules"]) - _grants(role["rules"]) == {
        ("trainer.kubeflow.org", "clustertrainingruntimes", v) for v in ("get", "list", "watch")
    } | {(g, r, v) for g, r in (("", "nodes"), ("topology.volcano.sh", "hypernodes")) for v in ("get", "list", "watch")}
    # The cluster-wide grants left: reading the cluster-scoped runtimes, nodes and HyperNodes.
    cluster_roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    assert set(cluster_roles) == {"ring-controller-training-runtimes", "ring-controller-nodes"}
    assert _grants(cluster_roles["ring-controller-training-runtimes"]["rules"]) == {
        ("trainer.kubeflow.org", "clustertrainingruntimes", v) for v in ("get", "list", "watch")
    }
    assert _grants(cluster_roles["ring-controller-nodes"]["rules"]) == {
        (g, r, v) for g, r in (("", "nodes"), ("topology.volcano.sh", "hypernodes")) for v in ("get", "list", "watch")
    }
    assert parse(_args(docs)).namespaces == ("team-a", "team-b")


@pytest.mark.parametrize(
    ("values", "check"),
    [
        (
            {},
            lambda o: (
                o.namespaces == ()
                and o.leader_elect
                and o.log_format == "json"
                and o.touch_pods
                and not o.self_registration
            ),
        ),
        ({"logFormat": "console", "logLevel": "debug"}, lambda o: (o.log_format, o.log_level) == ("console", "debug")),
        (
            {"labelKey": "example.com/ring", "defaultPort": 3333},
            lambda o: (o.label_key, o.default_port) == ("example.com/ring", 3333),
        ),
        ({"rankTableVersion": "2.0", "workers": 4}, lambda o: (o.ranktable_version, o.workers) == ("2.0", 4)),
        ({"touchPods": False}, lambda o: not o.touch_pods),
        ({"selfRegistration": True}, lambda o: o.self_registration),
        ({"rankOrder": "topology"}, lambda o: o.rank_order == "topology"),
        ({"replicas": 1, "leaderElection": {"enabled": False}}, lambda o: not o.leader_elect),
        ({"extraArgs": ["--leader-elect-lease-duration=30s"]}, lambda o: o.lease_duration == 30.0),
    ],
    ids=[
        "defaults",
        "logs",
        "label-port",
        "ranktable-workers",
        "no-touch",
        "self-registration",
        "rank-order",
        "no-election",
        "extra",
    ],
)
def test_values_become_flags_the_daemon_accepts(values: dict[str, Any], check: Any) -> None:
    assert check(parse(_args(template(values))))


def test_image_replicas_and_resources_values() -> None:
    docs = template(
        {
            "image": {"repository": "registry.example/ring-controller", "tag": "9.9", "pullPolicy": "Always"},
            "replicas": 3,
            # Helm merges maps: null removes the default limits.
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": None},
        }
    )
    deployment = _one(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert deployment["spec"]["replicas"] == 3
    assert (container["image"], container["imagePullPolicy"]) == ("registry.example/ring-controller:9.9", "Always")
    assert container["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"}}


def test_another_release_names_everything_after_itself() -> None:
    docs = template(release="ring-test", namespace="ops")
    names = {d["metadata"]["name"] for d in docs}
    assert names == {
        "ring-test-ring-controller",
        "ring-test-ring-controller-leader-election",
        "ring-test-ring-controller-pod-writes",
    }
    account = _one(docs, "ServiceAccount")
    policy = _one(docs, "ValidatingAdmissionPolicy")
    (condition,) = policy["spec"]["matchConditions"]
    assert (
        condition["expression"] == 'request.userInfo.username == "system:serviceaccount:ops:ring-test-ring-controller"'
    )
    assert account["metadata"] == {**account["metadata"], "name": "ring-test-ring-controller", "namespace": "ops"}
    assert _one(docs, "ValidatingAdmissionPolicyBinding")["spec"]["policyName"] == policy["metadata"]["name"]
    for doc in docs:
        assert ("namespace" in doc["metadata"]) == (doc["kind"] not in CLUSTER_SCOPED), doc["kind"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "ring-test"


def test_flow_schema_puts_the_accounts_lease_requests_in_the_leader_election_level() -> None:
    assert not [d for d in template() if d["kind"] == "FlowSchema"]  # off by default
    docs = template({"leaderElection": {"enabled": True, "flowSchema": True}}, release="ring-test", namespace="ops")
    schema = _one(docs, "FlowSchema")
    assert schema["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    assert schema["metadata"]["name"] == "ring-test-ring-controller-ops-leader-election"
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": "leader-election"}
    assert spec["matchingPrecedence"] < 9000  # before the built-in service-accounts schema (workload-low)
    (rule,) = spec["rules"]
    account = _one(docs, "ServiceAccount")["metadata"]
    assert rule["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": account["name"], "namespace": account["namespace"]}}
    ]
    assert rule["resourceRules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"],
         "namespaces": ["ops"]}
    ]  # fmt: skip
    docs = template({"leaderElection": {"enabled": False, "flowSchema": True}}, sets=["replicas=1"])
    assert not [d for d in docs if d["kind"] == "FlowSchema"]  # no Lease, no schema


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["leaderElection.enabled=false"], "replicas > 1 needs leaderElection.enabled=true"),
        (["logFormat=xml"], "logFormat"),
        (["watchNamespaces={Team_A}"], "watchNamespaces"),
        (["replica=3"], "replica"),  # a typo of replicas
    ],
)
def test_bad_values_fail_with_a_message_naming_them(sets: list[str], message: str) -> None:
    argv = [charts.tool("helm"), "template", "r", CHART, *charts.helm_args(sets=sets)]
    proc = charts.run(argv, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


# -- kustomize ---------------------------------------------------------------------------


def test_kustomize_base_builds_the_shipped_objects() -> None:
    expected = by_identity(shipped(*charts.SHIPPED))
    built = by_identity(charts.kustomize(charts.KUSTOMIZE_BASE))
    assert sorted(built) == sorted(expected)
    for key, doc in expected.items():
        assert built[key] == doc, f"{key} differs"


def test_kustomize_overlay_moves_namespace_and_image(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = Path(os.path.relpath(charts.KUSTOMIZE_BASE, overlay))  # kustomize takes relative paths only
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [str(base)],
                "namespace": "ml-system",
                "images": [{"name": "ring-controller", "newName": "registry.example/ring-controller", "newTag": "9.9"}],
                "transformers": [str(base / "kustomize" / "fence")],
            }
        )
    )
    docs = charts.kustomize(overlay)
    assert {d["kind"] for d in docs} == {d["kind"] for d in shipped(*charts.SHIPPED)}
    for doc in docs:
        if doc["kind"] == "Namespace":
            assert doc["metadata"]["name"] == "ml-system"
        elif doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], doc["kind"]
        else:
            assert doc["metadata"]["namespace"] == "ml-system", doc["kind"]
        for subject in doc.get("subjects", []):
            assert subject == {"kind": "ServiceAccount", "name": "ring-controller", "namespace": "ml-system"}
    (container,) = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/ring-controller:9.9"
    (condition,) = _one(docs, "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    assert condition["expression"] == 'request.userInfo.username == "system:serviceaccount:ml-system:ring-controller"'


def test_kustomize_overlay_without_the_fence_keeps_the_old_username(tmp_path: Path) -> None:
    # Why the overlay in docs/operating.md lists kustomize/fence: without it the policy
    # would fence a ServiceAccount that no longer exists, leaving pod writes open.
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(charts.KUSTOMIZE_BASE, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [str(base)], "namespace": "ml-system"}))
    (condition,) = _one(charts.kustomize(overlay), "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    assert "system:serviceaccount:ring-controller:ring-controller" in condition["expression"]


def test_the_chart_refuses_a_cluster_below_the_controllers_floor() -> None:
    from ringcontroller.serverinfo import MIN_VERSION

    floor = ".".join(map(str, MIN_VERSION))
    below = f"{MIN_VERSION[0]}.{MIN_VERSION[1] - 1}.0"
    refused = charts.run(
        [charts.tool("helm"), "template", "ring-controller", CHART, "--kube-version", below], check=False
    )
    assert refused.returncode != 0
    assert "kubeVersion" in refused.stderr and below in refused.stderr
    accepted = charts.run([charts.tool("helm"), "template", "ring-controller", CHART, "--kube-version", f"{floor}.0"])
    assert "kind: Deployment" in accepted.stdout
