"""The agent's own Prometheus metrics (``ringcontroller_*``).

Created unregistered (``registry=None``): the daemon registers ``ALL`` in the
registry it serves, and tests may read them directly.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from agent.decide import JOB_STATUSES

CONFIGMAP_WRITES = Counter(
    "ringcontroller_configmap_writes_total",
    "ConfigMap writes by verb and result (ok, conflict, not_found, error).",
    ["verb", "result"],
    registry=None,
)
POD_TOUCHES = Counter(
    "ringcontroller_pod_touches_total",
    "Member pods annotated with the epoch of their completed spec (so the kubelet refreshes the mounted "
    "ConfigMap at once), by result (ok, gone, forbidden, error).",
    ["result"],
    registry=None,
)
INVALID_INPUTS = Counter(
    "ringcontroller_invalid_inputs_total",
    "Bad inputs found on workloads, pods and ConfigMaps, by reason.",
    ["reason"],
    registry=None,
)
JOBS = Gauge(
    "ringcontroller_jobs",
    "Jobs tracked, by the status of their spec (initializing, completed, invalid).",
    ["status"],
    registry=None,
)
#: Every ``status`` of :data:`JOBS`, exported from the start at 0 (as
#: controller-runtime does for its result labels): a status no job has reached
#: yet is a 0, not a missing series, so ``ringcontroller_jobs{status="invalid"}``
#: exists on every replica and the alert on it and the dashboard read a value.
for _status in JOB_STATUSES:
    JOBS.labels(_status)
SPEC_LATENCY = Histogram(
    "ringcontroller_spec_latency_seconds",
    "Time from the last member seen ready to the completed spec written.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=None,
)
EVENTS = Counter(
    "ringcontroller_events_total",
    "Kubernetes Events emitted, by type and reason.",
    ["type", "reason"],
    registry=None,
)
EVENTS_DROPPED = Counter(
    "ringcontroller_events_dropped_total",
    "Kubernetes Events not sent, by cause: duplicate (same object, reason and message within 10 min) "
    "or rate_limited (over the per-object burst).",
    ["cause"],
    registry=None,
)

#: Every collector above, for the daemon to register.
ALL = (CONFIGMAP_WRITES, POD_TOUCHES, INVALID_INPUTS, JOBS, SPEC_LATENCY, EVENTS, EVENTS_DROPPED)
