"""The agent's own Prometheus metrics (``ringcontroller_*``), as one group per registry.

Same idiom as :mod:`ringcontroller.metrics`: :class:`AgentMetrics` creates
its collectors on the ``CollectorRegistry`` it is given, nothing is
registered at import. The daemon passes the group registered on the registry
it serves (``ringcontroller.metrics.agent_metrics(REGISTRY)``); a component
built without one gets a group on a private registry, so tests read values
that start at zero and never share them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent.decide import JOB_STATUSES
from model.kinds import label_values

__all__ = ["SPEC_LATENCY_BUCKETS", "AgentMetrics", "private"]

SPEC_LATENCY_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class AgentMetrics:
    """The write path's, the jobs' and the Events' metrics, registered on ``registry``.

    Every per-job metric has a ``kind`` label: the short name of the job's
    workload kind (``vcjob``, ``trainjob``, ``jobset``, ``deploy``, ``job``,
    ``lws``, ``sts``: :func:`model.kinds.short_name`), so its values are
    bounded by the kinds the controller serves, never by the jobs. Every
    ``kind`` and ``status`` of ``ringcontroller_jobs``
    (:data:`agent.decide.JOB_STATUSES`) exists from the start at 0 (as
    controller-runtime does for its result labels): a status no job has
    reached yet is a 0, not a missing series, so
    ``ringcontroller_jobs{status="invalid"}`` exists on every replica and the
    alert on it and the dashboard read a value.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.configmap_writes = Counter(
            "ringcontroller_configmap_writes_total",
            "ConfigMap writes by workload kind, verb and result (ok, conflict, not_found, error).",
            ["kind", "verb", "result"],
            registry=registry,
        )
        self.pod_touches = Counter(
            "ringcontroller_pod_touches_total",
            "Member pods annotated with the epoch of their completed spec (so the kubelet refreshes the mounted "
            "ConfigMap at once), by result (ok, gone, forbidden, error; skipped: members of a job over "
            "--touch-max-members, left to the kubelet's periodic sync), by workload kind.",
            ["kind", "result"],
            registry=registry,
        )
        self.invalid_inputs = Counter(
            "ringcontroller_invalid_inputs_total",
            "Bad inputs found on workloads, pods and ConfigMaps, by workload kind and reason.",
            ["kind", "reason"],
            registry=registry,
        )
        self.jobs = Gauge(
            "ringcontroller_jobs",
            "Jobs tracked, by workload kind and the status of their spec (initializing, completed, invalid).",
            ["kind", "status"],
            registry=registry,
        )
        for kind in label_values():
            for status in JOB_STATUSES:
                self.jobs.labels(kind, status)
        self.spec_latency = Histogram(
            "ringcontroller_spec_latency_seconds",
            "Time from the last member seen ready to the completed spec written, by workload kind.",
            ["kind"],
            buckets=SPEC_LATENCY_BUCKETS,
            registry=registry,
        )
        # Each kind's histogram exists at 0 from the start: a series born at its
        # first observation has no increase Prometheus can see, so rate() and the
        # dashboard's latency panel would miss every kind's first spec.
        for kind in label_values():
            self.spec_latency.labels(kind)
        self.events = Counter(
            "ringcontroller_events_total",
            "Kubernetes Events emitted, by the kind of the workload they are about, type and reason.",
            ["kind", "type", "reason"],
            registry=registry,
        )
        self.events_dropped = Counter(
            "ringcontroller_events_dropped_total",
            "Kubernetes Events not sent, by cause: duplicate (same object, reason and message within 10 min) "
            "or rate_limited (over the per-object burst).",
            ["cause"],
            registry=registry,
        )


def private() -> AgentMetrics:
    """A group on a registry of its own (the default of a component built without one)."""
    return AgentMetrics(CollectorRegistry())
