"""Read one sample of a prometheus-client metric object (the agent's are unregistered)."""

from __future__ import annotations

from prometheus_client.metrics import MetricWrapperBase


def value(metric: MetricWrapperBase, **labels: str) -> float:
    """The counter's or gauge's current value for ``labels`` (0.0 if never set)."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name in (family.name, f"{family.name}_total") and sample.labels == labels:
                return float(sample.value)
    return 0.0
