"""Prometheus metric definitions of the ring-controller daemon.

One place for every metric name. Where controller-runtime has a metric for
the same thing we use its name, help meaning and label set, so existing
dashboards and alerts for Go controllers work unchanged; our own metrics are
prefixed ``ringcontroller_``.

Metrics are grouped in small classes that are instantiated once per
``CollectorRegistry`` (``workqueue_metrics(registry)``,
``client_metrics(registry)``): prometheus-client refuses to register a name
twice in one registry, and tests want a fresh registry each so that values
start at zero. The daemon serves ``REGISTRY``, the default for every
component that takes an optional ``registry``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from agent.metrics import AgentMetrics

__all__ = [
    "RECONCILE_RESULTS",
    "RECONCILE_TIME_BUCKETS",
    "REGISTRY",
    "WORKQUEUE_DURATION_BUCKETS",
    "ClientMetrics",
    "LeaderMetrics",
    "AgentMetrics",
    "ApiMetrics",
    "ReconcileMetrics",
    "SpecMetrics",
    "WorkqueueMetrics",
    "agent_metrics",
    "api_metrics",
    "client_metrics",
    "leader_metrics",
    "reconcile_metrics",
    "spec_metrics",
    "workqueue_metrics",
]

REGISTRY = CollectorRegistry(auto_describe=True)
"""The daemon's registry: components register here unless given another one.

It also carries the process metrics (``process_resident_memory_bytes``,
``process_cpu_seconds_total``, open fds, ...) and the interpreter's
(``python_gc_*``, ``python_info``), as Go controllers export ``process_*`` and
``go_*``."""

ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

# controller-runtime: ExponentialBuckets(10e-9, 10, 12), i.e. 10 ns .. 1000 s.
WORKQUEUE_DURATION_BUCKETS: tuple[float, ...] = tuple(10.0**exp for exp in range(-8, 4))


class WorkqueueMetrics:
    """The workqueue metrics of controller-runtime (v0.20+ label set).

    Every series carries ``name`` and ``controller``; controller-runtime sets
    both to the queue's name, and so do we. ``workqueue_depth`` also carries
    ``priority``, empty for a queue without priorities.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["name", "controller"]
        self.depth = Gauge(
            "workqueue_depth",
            "Current depth of workqueue by workqueue and priority",
            [*labels, "priority"],
            registry=registry,
        )
        self.adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            labels,
            registry=registry,
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels,
            buckets=WORKQUEUE_DURATION_BUCKETS,
            registry=registry,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            labels,
            buckets=WORKQUEUE_DURATION_BUCKETS,
            registry=registry,
        )
        self.unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress not yet observed by work_duration; "
            "a steadily growing value means stuck workers",
            labels,
            registry=registry,
        )
        self.longest_running_processor = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds the longest running processor of the workqueue has been running",
            labels,
            registry=registry,
        )
        self.retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            labels,
            registry=registry,
        )


class ClientMetrics:
    """Our API client and reflector counters.

    ``ringcontroller_api_requests_total{verb,code}``: every request to the API
    server; ``verb`` is the Kubernetes verb (``list``, ``watch``, ``get``,
    ``create``, ``update``, ``patch``, ``delete``), ``code`` the HTTP status or
    ``<error>`` when no response arrived (client-go's convention).
    ``ringcontroller_watch_restarts_total{resource}``: watches re-opened from
    the last resourceVersion after the previous one ended (server timeout,
    disconnect, error). ``ringcontroller_relists_total{resource}``: full lists
    after the first (410 Gone, or a watch that could not resume).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.api_requests = Counter(
            "ringcontroller_api_requests_total",
            "Requests to the Kubernetes API server by verb and HTTP status code",
            ["verb", "code"],
            registry=registry,
        )
        self.watch_restarts = Counter(
            "ringcontroller_watch_restarts_total",
            "Watches re-opened from the last resourceVersion after the previous one ended",
            ["resource"],
            registry=registry,
        )
        self.relists = Counter(
            "ringcontroller_relists_total",
            "Full lists after the initial one (resourceVersion expired or watch not resumable)",
            ["resource"],
            registry=registry,
        )
        self.watch_events = Counter(
            "ringcontroller_watch_events_total",
            "Watch events applied to an informer's cache, by resource and event type",
            ["resource", "type"],
            registry=registry,
        )


# controller-runtime's reconcile time buckets: 5 ms .. 60 s.
RECONCILE_TIME_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)  # fmt: skip

RECONCILE_RESULTS: tuple[str, ...] = ("success", "error", "requeue", "requeue_after")
"""The ``result`` label values of ``controller_runtime_reconcile_total``."""


class ReconcileMetrics:
    """controller-runtime's per-controller reconcile metrics.

    The caller (the controller's worker loop) must, per reconcile, count
    exactly one ``reconcile_total{result}`` (and ``reconcile_errors_total``
    when the result is ``error``), observe its duration in
    ``reconcile_time_seconds``, and keep ``active_workers`` at the number of
    reconciles running. Call :meth:`init` once per controller so every
    series exists at 0 from the start, as controller-runtime does.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=registry,
        )
        self.errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=RECONCILE_TIME_BUCKETS,
            registry=registry,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=registry,
        )

    def init(self, controller: str, *, max_concurrent: int) -> None:
        """Create every series of ``controller`` (at 0) and set its worker limit."""
        for result in RECONCILE_RESULTS:
            self.total.labels(controller, result)
        self.errors.labels(controller)
        self.time.labels(controller)
        self.active_workers.labels(controller).set(0)
        self.max_concurrent.labels(controller).set(max_concurrent)


#: Seconds the event loop ran late (:class:`LoopMetrics`).
LOOP_LAG_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopMetrics:
    """``ringcontroller_event_loop_lag_seconds``: how late a timer on the daemon's
    event loop fired, observed every :data:`LOOP_LAG_INTERVAL` seconds by
    ``ringcontroller.controller`` (the caller): the time everything on the loop
    (informers, syncs, the Lease's answers) waited behind whatever held it.
    ``ringcontroller_event_loop_lag_max_seconds``: the largest lag since the
    process started."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.lag = Histogram(
            "ringcontroller_event_loop_lag_seconds",
            "How late a timer on the event loop fired, sampled every 0.25 s",
            buckets=LOOP_LAG_BUCKETS,
            registry=registry,
        )
        self.lag_max = Gauge(
            "ringcontroller_event_loop_lag_max_seconds",
            "The largest event loop lag seen since the process started",
            registry=registry,
        )
        self._max = 0.0

    def observe(self, lag: float) -> None:
        """Record one sample of ``lag`` seconds."""
        self.lag.observe(lag)
        if lag > self._max:
            self._max = lag
            self.lag_max.set(lag)


#: Seconds between two samples of the event loop's lag.
LOOP_LAG_INTERVAL = 0.25


#: Seconds of one successful Lease renewal, from its first request to the answer.
RENEWAL_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


class LeaderMetrics:
    """``leader_election_master_status{name}``: 1 while this process holds
    Lease ``name``, 0 while it stands by (client-go's metric, as exported by
    controller-runtime). ``ringcontroller_lease_renewal_seconds{name}``: how
    long each successful renewal took, from its first request to the answer
    (the time a slow API server takes out of the renew deadline). Absent when
    leader election is off."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease. Please make sure "
            "to group by name.",
            ["name"],
            registry=registry,
        )
        self.renewal = Histogram(
            "ringcontroller_lease_renewal_seconds",
            "Seconds one successful renewal of the leader Lease took, from its first request to the answer",
            ["name"],
            buckets=RENEWAL_BUCKETS,
            registry=registry,
        )


class SpecMetrics:
    """``ringcontroller_oldest_incomplete_spec_seconds``: how long the longest
    waiting job has had no completed spec (0 when none waits); the signal
    for the "spec incomplete too long" alert. Set by the controller through
    :meth:`Gauge.set_function`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.oldest_incomplete = Gauge(
            "ringcontroller_oldest_incomplete_spec_seconds",
            "Seconds the job waiting longest for a completed spec has been waiting (0: none waits)",
            registry=registry,
        )


class ApiMetrics:
    """``ringcontroller_api_available{api}``: 1 when the API server serves the
    optional API ``api`` (:data:`ringcontroller.serverinfo.OPTIONAL_APIS`),
    0 when the feature that needs it is off. Set once, at discovery."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.available = Gauge(
            "ringcontroller_api_available",
            "1 when the API server serves the optional API (the feature that needs it is on), 0 when not",
            ["api"],
            registry=registry,
        )


_M = TypeVar("_M")


def _per_registry(factory: Callable[[CollectorRegistry], _M]) -> Callable[[CollectorRegistry | None], _M]:
    cache: weakref.WeakKeyDictionary[CollectorRegistry, _M] = weakref.WeakKeyDictionary()

    def get(registry: CollectorRegistry | None = None) -> _M:
        reg = REGISTRY if registry is None else registry
        found = cache.get(reg)
        if found is None:
            found = factory(reg)
            cache[reg] = found
        return found

    return get


workqueue_metrics = _per_registry(WorkqueueMetrics)
"""``workqueue_metrics(registry=None)``: the workqueue metrics registered on
``registry`` (default ``REGISTRY``), created on first use."""

client_metrics = _per_registry(ClientMetrics)
"""``client_metrics(registry=None)``: the API/reflector counters registered on
``registry`` (default ``REGISTRY``), created on first use."""

reconcile_metrics = _per_registry(ReconcileMetrics)
"""``reconcile_metrics(registry=None)``: controller-runtime's reconcile metrics
on ``registry`` (default ``REGISTRY``), created on first use."""

leader_metrics = _per_registry(LeaderMetrics)
"""``leader_metrics(registry=None)``: the leader-election gauge on ``registry``
(default ``REGISTRY``), created on first use (so it is absent without
leader election)."""

agent_metrics = _per_registry(AgentMetrics)
"""``agent_metrics(registry=None)``: the agent's metrics (:class:`agent.metrics.AgentMetrics`)
on ``registry`` (default ``REGISTRY``), created on first use."""

spec_metrics = _per_registry(SpecMetrics)
"""``spec_metrics(registry=None)``: the spec-age gauge on ``registry``
(default ``REGISTRY``), created on first use."""

loop_metrics = _per_registry(LoopMetrics)
"""``loop_metrics(registry=None)``: the event loop's lag on ``registry``
(default ``REGISTRY``), created on first use."""

api_metrics = _per_registry(ApiMetrics)
"""``api_metrics(registry=None)``: the optional-API gauge on ``registry``
(default ``REGISTRY``), created on first use."""
