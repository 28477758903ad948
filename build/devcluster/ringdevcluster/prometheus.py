"""The dev cluster's Prometheus (``--with prometheus``): its configuration, derived from build/monitoring.yaml.

A cluster without the Prometheus Operator cannot use a PodMonitor or a
PrometheusRule, so the plain Prometheus that ``up --with prometheus`` runs on
the host reads what the Operator would have generated from them, translated
here in one place:

* :func:`scrape_config` turns the PodMonitor into a scrape job with
  Kubernetes service discovery (``role: pod``) and the relabelling the
  Operator writes for it: keep pods whose labels match ``selector.matchLabels``
  in the ``namespaceSelector``'s namespaces, keep the container port named by
  each ``podMetricsEndpoints[].port``, drop finished pods, and set the target
  labels ``namespace``, ``pod``, ``container``, ``endpoint`` (the port name)
  and ``job`` (the value of the pod label ``jobLabel`` names, else
  ``<namespace>/<name>``). Its path, interval and timeout come from the
  endpoint unless the caller overrides the interval (the dev cluster scrapes
  more often so a test sees rates within seconds).
* :func:`rule_groups` returns the PrometheusRule's ``spec.groups`` unchanged:
  that is already a Prometheus rule file. promtool checks and unit-tests the
  same extraction (tests/tools/test_alert_rules.py).

Only the PodMonitor fields build/monitoring.yaml uses are translated; any
other field is refused with an error naming it, so a PodMonitor edited with a
new field cannot be silently scraped differently here than by the Operator.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MONITORING_FILE",
    "MonitoringError",
    "config",
    "load_monitoring",
    "rule_groups",
    "scrape_config",
]

Json = dict[str, Any]

#: The shipped monitoring objects (PodMonitor and PrometheusRule), beside this package in the checkout.
MONITORING_FILE = Path(__file__).resolve().parents[2] / "monitoring.yaml"

_SPEC_FIELDS = {"jobLabel", "selector", "namespaceSelector", "podMetricsEndpoints"}
_ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout"}


class MonitoringError(ValueError):
    """build/monitoring.yaml is missing, unreadable, or uses a field this translation does not know."""


def load_monitoring(path: Path = MONITORING_FILE) -> dict[str, Json]:
    """The documents of ``path`` by kind (``PodMonitor``, ``PrometheusRule``); each kind must appear once."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except OSError as err:
        raise MonitoringError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise MonitoringError(f"{path} is not valid YAML: {err}") from None
    by_kind: dict[str, Json] = {}
    for doc in docs:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if kind in by_kind:
            raise MonitoringError(f"{path} has more than one {kind}; the dev cluster translates exactly one")
        by_kind[str(kind)] = doc
    for kind in ("PodMonitor", "PrometheusRule"):
        if kind not in by_kind:
            raise MonitoringError(f"{path} has no {kind}")
    return by_kind


def _regex_quote(text: str) -> str:
    """``text`` as an RE2 pattern matching it literally (Prometheus anchors relabel regexes)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def _sanitize(label: str) -> str:
    """A Kubernetes label name as Prometheus's service discovery spells it in ``__meta_*`` labels."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _unknown(where: str, given: Mapping[str, Any], known: set[str]) -> None:
    extra = sorted(set(given) - known)
    if extra:
        raise MonitoringError(
            f"{where} uses {', '.join(extra)}, which the dev cluster's PodMonitor translation does not "
            f"support (known: {', '.join(sorted(known))}); extend ringdevcluster/prometheus.py"
        )


def scrape_config(podmonitor: Json, *, kubeconfig: Path | None = None, interval: str | None = None) -> list[Json]:
    """The Prometheus scrape jobs (one per metrics endpoint) the Operator would generate for ``podmonitor``.

    ``kubeconfig`` is the file service discovery authenticates with (None:
    in-cluster); ``interval`` overrides each endpoint's scrape interval (the
    timeout is capped to it, as Prometheus requires).
    """
    meta = podmonitor.get("metadata") or {}
    spec = podmonitor.get("spec") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not name or not namespace:
        raise MonitoringError("the PodMonitor needs metadata.name and metadata.namespace")
    _unknown("the PodMonitor's spec", spec, _SPEC_FIELDS)
    selector = spec.get("selector") or {}
    _unknown("the PodMonitor's selector", selector, {"matchLabels"})
    match_labels: Mapping[str, str] = selector.get("matchLabels") or {}
    if not match_labels:
        raise MonitoringError("the PodMonitor's selector has no matchLabels: it would scrape every pod")
    ns_selector = spec.get("namespaceSelector") or {}
    _unknown("the PodMonitor's namespaceSelector", ns_selector, {"matchNames"})
    namespaces: Sequence[str] = ns_selector.get("matchNames") or [namespace]
    endpoints = spec.get("podMetricsEndpoints") or []
    if not endpoints:
        raise MonitoringError("the PodMonitor has no podMetricsEndpoints")
    sd: Json = {"role": "pod", "namespaces": {"names": list(namespaces)}}
    if kubeconfig is not None:
        sd["kubeconfig_file"] = str(kubeconfig)
    jobs = []
    for index, endpoint in enumerate(endpoints):
        _unknown(f"podMetricsEndpoints[{index}]", endpoint, _ENDPOINT_FIELDS)
        port = endpoint.get("port")
        if not port:
            raise MonitoringError(f"podMetricsEndpoints[{index}] names no port")
        relabel: list[Json] = [
            {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)", "action": "drop"},
        ]
        for key, value in sorted(match_labels.items()):
            relabel.append(
                {
                    "source_labels": [
                        f"__meta_kubernetes_pod_label_{_sanitize(key)}",
                        f"__meta_kubernetes_pod_labelpresent_{_sanitize(key)}",
                    ],
                    "regex": f"({_regex_quote(str(value))});true",
                    "action": "keep",
                }
            )
        relabel += [
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": _regex_quote(port),
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{namespace}/{name}"},
        ]
        if spec.get("jobLabel"):
            relabel.append(
                {
                    "source_labels": [f"__meta_kubernetes_pod_label_{_sanitize(spec['jobLabel'])}"],
                    "regex": "(.+)",
                    "target_label": "job",
                    "replacement": "${1}",
                }
            )
        relabel.append({"target_label": "endpoint", "replacement": port})
        every = interval or endpoint.get("interval") or "30s"
        job: Json = {
            "job_name": f"podMonitor/{namespace}/{name}/{index}",
            "honor_labels": False,
            "metrics_path": endpoint.get("path") or "/metrics",
            "scrape_interval": every,
            "kubernetes_sd_configs": [sd],
            "relabel_configs": relabel,
        }
        timeout = endpoint.get("scrapeTimeout")
        if timeout and seconds(timeout) > seconds(every):
            timeout = every  # Prometheus refuses a timeout longer than the interval
        if timeout:
            job["scrape_timeout"] = timeout
        jobs.append(job)
    return jobs


def seconds(duration: str) -> float:
    """A Prometheus duration such as ``30s``, ``1m30s`` or ``500ms`` in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise MonitoringError(f"{duration!r} is not a Prometheus duration")
    return sum(float(n) * units[u] for n, u in parts)


def rule_groups(prometheus_rule: Json) -> Json:
    """The PrometheusRule's rules as a Prometheus rule file (``{"groups": [...]}``), unchanged."""
    groups = (prometheus_rule.get("spec") or {}).get("groups")
    if not groups:
        raise MonitoringError("the PrometheusRule has no spec.groups")
    return {"groups": groups}


def config(
    *, monitoring: Path = MONITORING_FILE, kubeconfig: Path, rules_file: Path, interval: str
) -> tuple[Json, Json]:
    """``(prometheus.yml, rule file)`` for the dev cluster: the PodMonitor's jobs and the PrometheusRule's groups."""
    objects = load_monitoring(monitoring)
    jobs = scrape_config(objects["PodMonitor"], kubeconfig=kubeconfig, interval=interval)
    main: Json = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules_file)],
        "scrape_configs": jobs,
    }
    return main, rule_groups(objects["PrometheusRule"])
