"""Prometheus really scrapes the deployed controller; the shipped alerts and dashboard read what it exports.

The cluster's Prometheus (``ring-devcluster up --with prometheus``) runs the
scrape job and the rules derived from build/monitoring.yaml (the PodMonitor's
pod selector and port name, through Kubernetes service discovery; the
PrometheusRule's groups unchanged). The controller runs from its image on the
real node, deployed from the shipped manifests (tests/support/deployed.py).
After a small workload (a job whose spec completes, one with a bad port
annotation), this test asks Prometheus's HTTP API for:

* the targets: exactly the two replicas' ``metrics`` ports, both ``up`` 1;
* the controller's series with the labels the rules and the dashboard
  select and group by (``job``, ``namespace``, ``pod``, ``name``, ``status``...);
* the rules: loaded from this checkout's file, healthy, none firing, and
  each alert's signal (its expression without the threshold) answered;
* every dashboard panel's PromQL and every variable's values: each returns
  finite data over the test's time range; before the workload already, all
  but those :data:`EMPTY_UNTIL` names with the event that fills them (the
  table in docs/operating.md, "Monitoring").
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from ringdevcluster import addons
from ringdevcluster import prometheus as prom
from tests.support import promapi
from tests.support.deployed import NAMESPACE, completed_spec, create_workload, deployed_controller, wait_leader
from tests.support.kubehelp import wait_for
from tests.support.promapi import PrometheusApi

pytestmark = pytest.mark.integration

#: The ``job`` label: the pod label the PodMonitor's jobLabel names.
JOB = "ring-controller"
#: Dashboard panels that are empty (or NaN) until an event, which the workload below causes (docs/operating.md's table).
#: Every other panel must answer from the first scrapes on, before any job.
EMPTY_UNTIL: dict[str, str] = {
    "Time from last member ready to spec written": "a spec completes",
    "ConfigMap writes by result": "the first ConfigMap write",
    "Invalid inputs by reason": "the first bad input",
    "Events emitted": "the first Event",
    "Reconcile time": "a sync within the rate window",
    "Queue wait (p99) and retries/A": "a sync within the rate window",
}
#: Metric families the rules or the dashboard name that the leader must export, with the labels they are read by.
LEADER_SERIES = {
    "controller_runtime_reconcile_total": {"controller", "result"},
    "controller_runtime_reconcile_errors_total": {"controller"},
    "controller_runtime_reconcile_time_seconds_bucket": {"controller", "le"},
    "controller_runtime_active_workers": {"controller"},
    "controller_runtime_max_concurrent_reconciles": {"controller"},
    "workqueue_depth": {"name", "controller"},
    "workqueue_queue_duration_seconds_bucket": {"name", "le"},
    "workqueue_retries_total": {"name"},
    "leader_election_master_status": {"name"},
    "ringcontroller_jobs": {"kind", "status"},
    "ringcontroller_oldest_incomplete_spec_seconds": set(),
    "ringcontroller_spec_latency_seconds_bucket": {"le"},
    "ringcontroller_configmap_writes_total": {"verb", "result"},
    "ringcontroller_invalid_inputs_total": {"reason"},
    "ringcontroller_events_total": {"type", "reason"},
    "ringcontroller_api_requests_total": {"verb", "code"},
    "ringcontroller_watch_restarts_total": {"resource"},
    "ringcontroller_relists_total": {"resource"},
    "process_resident_memory_bytes": set(),
    "process_cpu_seconds_total": set(),
}
#: The labels the scrape itself puts on every series.
TARGET_LABELS = {"job", "namespace", "pod", "container", "endpoint", "instance"}


def _rate_interval() -> str:
    """Grafana's ``$__rate_interval`` for this Prometheus at a one-scrape step: 4 scrape intervals."""
    seconds = int(addons.PROMETHEUS_SCRAPE_INTERVAL.removesuffix("s"))
    return f"{4 * seconds}s"


def _empty_targets(
    prometheus: PrometheusApi, targets: list[promapi.PanelQuery], *, start: float, end: float
) -> list[str]:
    """The targets with no finite value: stat panels now, time series over ``start``..``end``."""
    step = int(addons.PROMETHEUS_SCRAPE_INTERVAL.removesuffix("s"))
    empty = []
    for target in targets:
        expr = target.promql(job=JOB, namespace=NAMESPACE, rate_interval=_rate_interval())
        if target.kind == "stat":
            result = prometheus.query(expr)
        else:
            result = prometheus.query_range(expr, start=start, end=end, step=step)
        if not promapi.finite(result):
            empty.append(f"{target.panel} [{target.ref}]: {expr}")
    return empty


def _event_driven(target: promapi.PanelQuery) -> bool:
    return target.panel in EMPTY_UNTIL or f"{target.panel}/{target.ref}" in EMPTY_UNTIL


def _up_by_pod(prom: PrometheusApi) -> dict[str, float]:
    return {s["metric"]["pod"]: float(s["value"][1]) for s in prom.query(f'up{{job="{JOB}"}}')}


def _scrapes_by_pod(prom: PrometheusApi) -> dict[str, float]:
    """How many scrapes of each pod Prometheus holds (the last hour: longer than any test)."""
    return {s["metric"]["pod"]: float(s["value"][1]) for s in prom.query(f'count_over_time(up{{job="{JOB}"}}[1h])')}


def _scraped_again(prom: PrometheusApi, pods: set[str], since: dict[str, float], times: int) -> bool:
    """Every pod of ``pods`` scraped at least ``times`` more times than ``since`` counted."""
    now = _scrapes_by_pod(prom)
    return all(now.get(pod, 0.0) >= since.get(pod, 0.0) + times for pod in pods)


def test_prometheus_scrapes_both_replicas_and_answers_every_rule_and_panel(
    k8s: Any, namespace: str, prometheus: PrometheusApi
) -> None:
    started = time.time()
    with deployed_controller(k8s) as pods:
        names = {p.metadata.name for p in pods}
        ips = {p.metadata.name: p.status.pod_ip for p in pods}
        leader = wait_leader(k8s, NAMESPACE, names)
        (standby,) = names - {leader}

        # Scraped through service discovery: both replicas, 1, within a few scrape intervals.
        seen: list[dict[str, float]] = []

        def both_up() -> bool:
            seen.append(_up_by_pod(prometheus))
            return seen[-1] == dict.fromkeys(names, 1.0)

        try:
            wait_for(both_up, timeout=90, interval=1, what=f"up{{job={JOB!r}}} == 1 for {sorted(names)}")
        except AssertionError as err:
            raise AssertionError(f"{err}; up by pod at the last polls: {seen[-3:]}") from None
        targets = prometheus.get("targets", state="active")["activeTargets"]
        ours = [t for t in targets if t["labels"].get("job") == JOB]
        assert sorted(t["scrapeUrl"] for t in ours) == sorted(f"http://{ip}:8080/metrics" for ip in ips.values()), (
            "only the containers' `metrics` ports are scraped, not the health port"
        )
        assert all(t["health"] == "up" for t in ours), ours

        # Before any job: every panel not driven by an event already answers, once
        # each replica has been scraped four times. A rate needs two samples in its
        # window, and the range query below evaluates every scrape interval from
        # `started`, so its last point may lie up to one interval before now: with
        # only two scrapes it can fall before the second (seen in a full run).
        wait_for(
            lambda: _scraped_again(prometheus, names, {}, 4),
            timeout=90,
            interval=1,
            what="four scrapes of each replica",
        )
        queries = promapi.dashboard_queries()
        assert {q.panel for q in queries} | {q.panel + "/" + q.ref for q in queries} >= set(EMPTY_UNTIL)
        steady = [q for q in queries if not _event_driven(q)]
        empty = _empty_targets(prometheus, steady, start=started, end=time.time())
        assert not empty, "dashboard targets without data before any job:\n  " + "\n  ".join(empty)

        # A small workload: a job whose spec completes, and one with a bad port annotation.
        create_workload(k8s, namespace, "first")
        wait_for(lambda: completed_spec(k8s, namespace, "first"), timeout=60, what="the deployed controller's spec")
        create_workload(k8s, namespace, "badport", replicas=1, annotations={"ring-controller/port": "http"})
        wait_for(
            lambda: prometheus.query(f'ringcontroller_invalid_inputs_total{{job="{JOB}", reason="invalid_port"}}'),
            timeout=60,
            interval=1,
            what="the bad port counted and scraped",
        )
        # Two more scrapes after the last change, so every rate has a sample on each side.
        scraped = _scrapes_by_pod(prometheus)
        wait_for(
            lambda: _scraped_again(prometheus, names, scraped, 2),
            timeout=60,
            interval=1,
            what="two more scrapes of each replica",
        )

        # The series the rules and the dashboard read, with their labels.
        leader_status = {
            s["metric"]["pod"]: float(s["value"][1])
            for s in prometheus.query(
                f'leader_election_master_status{{job="{JOB}", namespace="{NAMESPACE}", name="ring-controller"}}'
            )
        }
        assert leader_status == {leader: 1.0, standby: 0.0}
        for metric, labels in LEADER_SERIES.items():
            series = prometheus.query(f'{metric}{{job="{JOB}", namespace="{NAMESPACE}", pod="{leader}"}}')
            assert series, f"{metric}: no series from the leader {leader}"
            for s in series:
                missing = (TARGET_LABELS | labels) - set(s["metric"])
                assert not missing, f"{metric} lacks labels {sorted(missing)}: {s['metric']}"
                assert s["metric"]["container"] == "controller" and s["metric"]["endpoint"] == "metrics"
                assert s["metric"]["instance"] == f"{ips[leader]}:8080"

        # The rules: this checkout's, healthy, none firing, every alert's signal answered.
        expected_rules = _shipped_alerts()
        groups = prometheus.get("rules", type="alert")["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        # Prometheus prints expressions its own way (1e-9 becomes 0.000000001): compare the rest.
        assert {n: (r["duration"], r["labels"]) for n, r in loaded.items()} == expected_rules, (
            "Prometheus runs other rules than build/monitoring.yaml's"
        )
        for name, rule in loaded.items():
            assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
            assert rule["state"] == "inactive", f"{name} is {rule['state']} on a healthy deployment: {rule['alerts']}"
            signal = promapi.alert_signal(rule["query"])
            assert prometheus.query(signal), f"{name}: its signal {signal!r} returns nothing, it can never fire"

        # The dashboard: variables, then every target over the test's time range.
        variables = promapi.variable_queries()
        assert JOB in prometheus.get("label/job/values", **{"match[]": "controller_runtime_reconcile_total"})
        assert NAMESPACE in prometheus.get(
            "label/namespace/values", **{"match[]": f'controller_runtime_reconcile_total{{job="{JOB}"}}'}
        )
        assert set(variables) == {"job", "namespace"}, f"dashboard variables changed: {variables}"
        empty = _empty_targets(prometheus, queries, start=started, end=time.time())
        assert not empty, "dashboard targets with no data after the workload:\n  " + "\n  ".join(empty)
        print(
            f"\nFIGURE prometheus: {len(promapi.dashboard_queries())} dashboard targets, {len(loaded)} rules answered"
        )


def _shipped_alerts() -> dict[str, tuple[float, dict[str, str]]]:
    """Alert name -> (``for`` in seconds, labels), from build/monitoring.yaml (what Prometheus must have loaded)."""
    rules = prom.rule_groups(prom.load_monitoring()["PrometheusRule"])
    return {
        r["alert"]: (prom.seconds(r.get("for", "0s")), r.get("labels", {}))
        for g in rules["groups"]
        for r in g["rules"]
        if "alert" in r
    }
