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
from typing import Callable, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "REGISTRY",
    "WORKQUEUE_DURATION_BUCKETS",
    "ClientMetrics",
    "WorkqueueMetrics",
    "client_metrics",
    "workqueue_metrics",
]

REGISTRY = CollectorRegistry(auto_describe=True)
"""The daemon's registry: components register here unless given another one."""

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
