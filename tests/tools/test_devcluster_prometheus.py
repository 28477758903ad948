"""The dev cluster's plain Prometheus configuration, derived from build/monitoring.yaml's PodMonitor.

The translation (ringdevcluster.prometheus) is the one place that says how
the PodMonitor's selection becomes a scrape job without the Operator; these
tests pin what it produces from the shipped file and from edited copies, and
promtool accepts the result.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringdevcluster import prometheus as prom
from tests.support import promtool

pytestmark = pytest.mark.tools

Json = dict[str, Any]


@pytest.fixture
def podmonitor() -> Json:
    return prom.load_monitoring()["PodMonitor"]


def _relabel(job: Json, target: str) -> list[Json]:
    return [r for r in job["relabel_configs"] if r.get("target_label") == target]


def test_the_shipped_podmonitor_becomes_one_pod_discovery_job(podmonitor: Json) -> None:
    (job,) = prom.scrape_config(podmonitor, kubeconfig=Path("/k/kubeconfig"))
    assert job["kubernetes_sd_configs"] == [
        {"role": "pod", "namespaces": {"names": ["ring-controller"]}, "kubeconfig_file": "/k/kubeconfig"}
    ]
    assert job["metrics_path"] == "/metrics"
    assert (job["scrape_interval"], job["scrape_timeout"]) == ("30s", "10s")
    keeps = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert keeps == [
        {
            "source_labels": [
                "__meta_kubernetes_pod_label_app_kubernetes_io_name",
                "__meta_kubernetes_pod_labelpresent_app_kubernetes_io_name",
            ],
            "regex": "(ring-controller);true",
            "action": "keep",
        },
        {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"},
    ]
    # job: the Operator's default first, then the jobLabel's pod label when set.
    assert _relabel(job, "job")[-1]["source_labels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
    assert {r["target_label"] for r in job["relabel_configs"] if "target_label" in r} == {
        "namespace", "container", "pod", "job", "endpoint",
    }  # fmt: skip
    assert _relabel(job, "endpoint") == [{"target_label": "endpoint", "replacement": "metrics"}]


def test_the_selection_follows_the_podmonitor(podmonitor: Json) -> None:
    edited = copy.deepcopy(podmonitor)
    edited["spec"]["selector"]["matchLabels"] = {"example.com/app": "a.b", "tier": "x"}
    edited["spec"]["namespaceSelector"]["matchNames"] = ["one", "two"]
    edited["spec"]["podMetricsEndpoints"] = [{"port": "prom", "interval": "15s", "scrapeTimeout": "20s"}]
    del edited["spec"]["jobLabel"]
    (job,) = prom.scrape_config(edited, interval=None)
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["one", "two"]}}]
    keeps = [r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert keeps == [r"(a\.b);true", "(x);true", "prom"]  # one keep per label, dots quoted
    assert _relabel(job, "job") == [{"target_label": "job", "replacement": "ring-controller/ring-controller"}]
    assert job["scrape_timeout"] == "15s"  # capped to the interval, as Prometheus requires


def test_the_dev_cluster_interval_overrides_the_endpoints(podmonitor: Json) -> None:
    (job,) = prom.scrape_config(podmonitor, interval="5s")
    assert (job["scrape_interval"], job["scrape_timeout"]) == ("5s", "5s")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.update(podTargetLabels=["x"]), "podTargetLabels"),
        (lambda s: s["selector"].update(matchExpressions=[]), "matchExpressions"),
        (lambda s: s["podMetricsEndpoints"][0].update(relabelings=[]), "relabelings"),
        (lambda s: s["selector"].update(matchLabels={}), "no matchLabels"),
        (lambda s: s.update(podMetricsEndpoints=[]), "no podMetricsEndpoints"),
        (lambda s: s["podMetricsEndpoints"][0].pop("port"), "names no port"),
    ],
)
def test_fields_it_cannot_translate_are_refused_by_name(podmonitor: Json, edit: Any, message: str) -> None:
    edited = copy.deepcopy(podmonitor)
    edit(edited["spec"])
    with pytest.raises(prom.MonitoringError, match=message):
        prom.scrape_config(edited)


def test_a_missing_or_broken_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(prom.MonitoringError, match="cannot read"):
        prom.load_monitoring(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("kind: [")
    with pytest.raises(prom.MonitoringError, match="not valid YAML"):
        prom.load_monitoring(tmp_path / "bad.yaml")
    (tmp_path / "half.yaml").write_text("kind: PodMonitor\n")
    with pytest.raises(prom.MonitoringError, match="no PrometheusRule"):
        prom.load_monitoring(tmp_path / "half.yaml")


def test_the_rules_are_the_prometheusrules_groups_unchanged() -> None:
    objects = prom.load_monitoring()
    assert prom.rule_groups(objects["PrometheusRule"]) == {"groups": objects["PrometheusRule"]["spec"]["groups"]}


def test_promtool_accepts_the_generated_configuration(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    main, rules = prom.config(kubeconfig=kubeconfig, rules_file=tmp_path / "rules.yaml", interval="5s")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(main))
    proc = promtool.run("check", "config", tmp_path / "prometheus.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules['groups'][0]['rules'])} rules found" in proc.stdout


def test_the_addon_brings_the_real_node_and_reads_pods_only() -> None:
    from ringdevcluster import addons

    assert addons.expand(["prometheus"]) == ["node", "prometheus"]
    objects = dict(addons.objects("prometheus", ports={}, binaries={}, ca_cert=Path(__file__), ip_family="dual"))
    (role,) = [o for o in objects.values() if o["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    (binding,) = [o for o in objects.values() if o["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": addons.PROMETHEUS_USER}
    ]


def test_refresh_rewrites_the_files_only_when_the_monitoring_objects_changed(tmp_path: Path) -> None:
    from ringdevcluster import addons

    home = tmp_path / "addons" / "prometheus"
    home.mkdir(parents=True)
    assert addons.refresh("prometheus", state_dir=tmp_path) is True
    main = yaml.safe_load((home / "prometheus.yml").read_text())
    assert main["rule_files"] == [str(home / "rules.yaml")]
    assert main["scrape_configs"][0]["kubernetes_sd_configs"][0]["kubeconfig_file"] == str(home / "kubeconfig")
    assert main["scrape_configs"][0]["scrape_interval"] == addons.PROMETHEUS_SCRAPE_INTERVAL
    assert addons.refresh("prometheus", state_dir=tmp_path) is False
    (home / "rules.yaml").write_text("groups: []\n")  # an old checkout's rules
    assert addons.refresh("prometheus", state_dir=tmp_path) is True
    assert addons.refresh("jobset", state_dir=tmp_path) is False
