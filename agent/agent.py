"""The business agent: routes events to jobs, and syncs one job at a time.

Event handlers (``on_workload``, ``on_pod``, ``on_configmap``) are called by
the informers after their caches changed. They only work out which job the
object concerns and enqueue its key (plus, for pods, note when a member
became ready, for the latency metric); they never call the API.

``sync(key)`` is called by the daemon's queue workers, one key at a time per
key. It reads the job's workload, pods and ConfigMap from the caches (the
lookups passed in at construction) and hands them to the job's
:class:`~agent.worker.JobWorker`, created on first use and dropped when the
workload is gone (its ConfigMap goes with it, through its ownerReference).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from agent import metrics
from agent.api import KubeAPI
from agent.worker import JobWorker
from model.records import ConfigMapRecord, JobKey, ObjectKey, PodRecord, WorkloadRecord, object_key

log = structlog.get_logger()


class Agent:
    """Per-job workers behind an enqueue function. See the module doc."""

    def __init__(
        self,
        *,
        api: KubeAPI,
        enqueue: Callable[[JobKey], None],
        workload: Callable[[JobKey], WorkloadRecord | None],
        pods: Callable[[JobKey], list[PodRecord]],
        configmap: Callable[[ObjectKey], ConfigMapRecord | None],
        hccl_version: str = "v2",
    ) -> None:
        self._api = api
        self._enqueue = enqueue
        self._workload = workload
        self._pods = pods
        self._configmap = configmap
        self._hccl_version = hccl_version
        self._workers: dict[JobKey, JobWorker] = {}
        self._last_ready: dict[JobKey, float] = {}

    # Event handlers: enqueue only. -------------------------------------------

    def on_workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        """A workload was added, changed or deleted."""
        record = new or old
        if record is not None and old != new:
            self._enqueue(record.key)

    def on_pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        """A selected pod was added, changed or deleted."""
        if old == new:
            return
        for record in {r.job for r in (old, new) if r is not None and r.job is not None}:
            self._enqueue(record)
        if new is not None and new.job is not None and new.ready and not (old and old.ready):
            self._last_ready[new.job] = time.monotonic()

    def on_configmap(self, old: ConfigMapRecord | None, new: ConfigMapRecord | None) -> None:
        """A managed ConfigMap was added, changed or deleted (possibly by someone else)."""
        record = new or old
        if record is not None and record.job is not None and old != new:
            self._enqueue(record.job)

    # The sync. ----------------------------------------------------------------

    async def sync(self, key: JobKey) -> None:
        """Bring job ``key``'s ConfigMap up to date; raises to be retried with backoff."""
        workload = self._workload(key)
        if workload is None:
            worker = self._workers.pop(key, None)
            if worker is not None:
                _count(worker.status, -1)
                log.info("job.forgotten", job=key)
            self._last_ready.pop(key, None)
            return
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = JobWorker(api=self._api, hccl_version=self._hccl_version)
        before = worker.status
        cm = self._configmap(object_key(workload.namespace, workload.configmap))
        try:
            await worker.sync(workload, self._pods(key), cm, last_ready=self._last_ready.get(key))
        finally:
            if worker.status != before:
                _count(before, -1)
                _count(worker.status, +1)

    def status(self, key: JobKey) -> str | None:
        """The spec status last settled for ``key`` (for health and tests)."""
        worker = self._workers.get(key)
        return worker.status if worker else None


def _count(status: str, delta: int) -> None:
    if status:
        metrics.JOBS.labels(status).inc(delta)
