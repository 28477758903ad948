"""The controller loop: informers feed one work queue, workers sync jobs.

Three kinds of informer run side by side, each a :class:`Reflector` with a
store of slim records (one per watched namespace when ``--namespace`` lists
some, see :mod:`ringcontroller.scoped`; one for all namespaces by default):

- one per workload kind (:data:`model.kinds.KINDS`), label-selected;
- label-selected pods, indexed by job key;
- ConfigMaps carrying the controller's own label (its previous writes, so a
  restart can compare instead of rewriting);
- nodes, cluster-wide, each kept as its topology path only (the values of
  ``--topology-keys``), for topology rank order; not run when that flag is
  empty. A changed path enqueues the jobs with pods on that node. Volcano
  HyperNodes too, where that CRD is installed (their member selectors; a
  node's HyperNode path is worked out on use, :mod:`model.hypernode`).

An optional API the server lacks (:data:`ringcontroller.serverinfo.OPTIONAL_APIS`:
HyperNodes, ClusterTrainingRuntimes, ValidatingAdmissionPolicies) turns off
what needs it, with one ``api.unavailable`` line and
``ringcontroller_api_available{api}`` at 0; without ValidatingAdmissionPolicies
no job counts self-registrations, whatever its annotation says. ResourceClaims
are watched at the newest version the server serves (``resource.k8s.io/v1``,
else ``v1beta2`` or ``v1beta1`` on 1.33 and 1.32), with an ``api.version``
line naming the older one.

Their handlers go to :class:`agent.Agent`, which only enqueues job keys
(and only once workers run: a standby's queue stays empty).
``workers`` tasks take keys from the queue and call ``Agent.sync``, following
the queue's protocol (``forget`` on success, ``add_rate_limited`` on failure,
``done`` always) and the :class:`agent.agent.Result` it returns (``add_after``
when it asks to look again later). Workers start only after every cache has synced, so the
first syncs see complete state, and (with leader election) only while this
process leads; a standby keeps its caches warm.

Each sync is one controller-runtime "reconcile": counted in
``controller_runtime_reconcile_total{controller,result}`` (``success``,
``requeue_after`` for a result that asks to look again later, or ``error``;
a failed sync is retried with backoff, which controller-runtime also counts
as ``error``), timed in ``controller_runtime_reconcile_time_seconds``,
with ``controller_runtime_active_workers`` the syncs running now. After each
sync the controller notes whether the job still waits for a completed spec;
``ringcontroller_oldest_incomplete_spec_seconds`` is the longest such wait
(measured from the first sync in this process that found it incomplete).

Shutdown: ``stop(drain=True)`` shuts the queue down with drain (in-flight
syncs finish, nothing is half-written: each write is one request, and
``done`` follows it), bounded by ``timeout``; ``stop(drain=False)`` (the
lease was lost: another process may already be writing) cancels the workers
at once. Either way the informers are cancelled next, which closes their
watch connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from functools import partial
from typing import Any, Final

import structlog

from agent.agent import Agent
from agent.api import NotFound
from agent.worker import Offload
from model import podgroup, trainjob
from model.configmap import configmap_record
from model.hypernode import HyperNode, HyperNodeIndex, hypernode_record
from model.keys import MANAGED_LABEL, MANAGED_VALUE
from model.kinds import KINDS, WorkloadKind
from model.network import Attachment, claim_record
from model.pod import pod_record, with_claim_networks
from model.records import ConfigMapRecord, JobKey, PodRecord, WorkloadRecord
from model.serving import serving_workload
from model.topology import Path, RankOrder, node_path
from ranktable.backoff import Backoff
from ranktable.clusterspec import STATUS_COMPLETED
from ringcontroller import kube, memory
from ringcontroller.kube import ApiClient
from ringcontroller.metrics import (
    LOOP_LAG_INTERVAL,
    REGISTRY,
    agent_metrics,
    api_metrics,
    loop_metrics,
    reconcile_metrics,
    spec_metrics,
)
from ringcontroller.options import Options
from ringcontroller.reflector import Reflector
from ringcontroller.resource import CONFIGMAPS, HYPERNODES, NODES, PODS, RESOURCE_CLAIMS, RUNTIMES, of_kind
from ringcontroller.scoped import Scoped
from ringcontroller.serverinfo import OPTIONAL_APIS, served_version
from ringcontroller.workqueue import ShutDown, WorkQueue

log = structlog.get_logger()

QUEUE_NAME = "ring-controller"
#: Discovery retries: first and longest delay (seconds), doubling, no jitter.
DISCOVERY_BACKOFF: Final = (1.0, 30.0)


def _handlers(on_change: Any) -> dict[str, Any]:
    """Reflector callbacks that all funnel into ``on_change(old, new)``."""
    return {
        "on_add": lambda _key, new: on_change(None, new),
        "on_update": lambda _key, old, new: on_change(old, new),
        "on_delete": lambda _key, old: on_change(old, None),
    }


class Controller:
    """Informers, the queue and the workers of one daemon process."""

    def __init__(self, *, api: ApiClient, options: Options) -> None:
        self.options = options
        self._api = api
        self.queue: WorkQueue[JobKey] = WorkQueue(QUEUE_NAME, registry=REGISTRY)
        self.kube_api = kube.RestKubeAPI(api, registry=REGISTRY)
        namespaces = options.namespaces
        self.workloads: dict[str, Scoped[WorkloadRecord]] = {
            kind.short: Scoped(partial(self._workload_informer, kind), namespaces) for kind in KINDS
        }
        # Cluster-scoped and unlabelled: a TrainJob without numNodes takes its
        # runtime's. Only the count is kept.
        self.runtimes: Reflector[int] | None = Reflector(
            api,
            RUNTIMES,
            transform=trainjob.runtime_nodes,
            registry=REGISTRY,
            **_handlers(self._on_runtime),
        )
        self.pods: Scoped[PodRecord] = Scoped(
            lambda ns: Reflector(
                api,
                PODS,
                transform=partial(pod_record, default_port=options.default_port),
                label_selector=options.label_key,
                indexers={
                    "job": lambda p: list(p.job_keys),
                    "node": lambda p: [p.node] if p.node else [],
                    "claim": lambda p: [f"{p.namespace}/{name}" for _, name in p.claims],
                },
                namespace=ns,
                registry=REGISTRY,
                **_handlers(self._on_pod),
            ),
            namespaces,
        )
        self.configmaps: Scoped[ConfigMapRecord] = Scoped(
            lambda ns: Reflector(
                api,
                CONFIGMAPS,
                transform=configmap_record,
                label_selector=f"{MANAGED_LABEL}={MANAGED_VALUE}",
                namespace=ns,
                registry=REGISTRY,
                **_handlers(self._on_configmap),
            ),
            namespaces,
        )
        # DRA ResourceClaims that report a NIC (status.devices[].networkData), for jobs taking their
        # members' addresses from one (ring-controller.io/network-claim); where resource.k8s.io/v1 is served.
        self.claims: Scoped[tuple[Attachment, ...] | str] | None = Scoped(
            lambda ns: Reflector(
                api,
                RESOURCE_CLAIMS,
                transform=claim_record,
                namespace=ns,
                registry=REGISTRY,
                on_add=lambda key, _new: self._on_claim(key),
                on_update=lambda key, _old, _new: self._on_claim(key),
                on_delete=lambda key, _old: self._on_claim(key),
            ),
            namespaces,
        )
        # Cluster-scoped, unlabelled: the topology path of every node (a tuple of label values).
        self.nodes: Reflector[Path] | None = (
            Reflector(
                api,
                NODES,
                transform=partial(node_path, keys=options.topology_keys),
                registry=REGISTRY,
                metadata_only=True,  # labels only: no node status (images, conditions) on the wire
                on_add=lambda name, _new: self.agent.on_node(name),
                on_update=lambda name, old, new: self.agent.on_node(name) if old != new else None,
                on_delete=lambda name, _old: self.agent.on_node(name),
            )
            if options.topology_keys
            else None
        )
        # Cluster-scoped, where Volcano's network topology CRD is installed (discover() drops it otherwise).
        self.hypernodes: Reflector[HyperNode] | None = Reflector(
            api,
            HYPERNODES,
            transform=hypernode_record,
            registry=REGISTRY,
            on_add=lambda _name, _new: self._hypernodes_changed(),
            on_update=lambda _name, old, new: self._hypernodes_changed() if old != new else None,
            on_delete=lambda _name, _old: self._hypernodes_changed(),
        )
        self._hypernode_index: HyperNodeIndex | None = None
        #: Each optional API (:data:`OPTIONAL_APIS`) by name: served or not, as discovery found.
        self.api_available: dict[str, bool] = {}
        #: Each served optional API's group version in use (the newest served, :func:`served_version`).
        self.api_versions: dict[str, str] = {}
        #: Where big jobs are decided, off the event loop (closed by ``stop``).
        self._offload = Offload(release=memory.release)
        self.agent = Agent(
            api=self.kube_api,
            enqueue=self._enqueue,
            workload=self._workload,
            # A job key is <kind>/<namespace>/<name>; its pods are in its namespace.
            pods=self._job_pods,
            configmap=self.configmaps.get,
            hccl_version=options.ranktable_version,
            touch_pods=options.touch_pods,
            self_register=options.self_registration,
            max_members=options.max_members,
            touch_max_members=options.touch_max_members,
            metrics=agent_metrics(REGISTRY),
            order=RankOrder(
                rule=options.rank_order,  # type: ignore[arg-type]  # argparse checked it against RULES
                keys=options.topology_keys,
                node_path=self._node_path,
                hypernodes=self._hypernode_path,
            ),
            pods_on_node=lambda name: [p for r in self.pods for p in r.store.by_index("node", name)],
            offload=self._offload,
        )
        self._informers: list[asyncio.Task[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._incomplete_since: dict[JobKey, float] = {}
        self._stopped = False
        self._working = False
        reconcile = reconcile_metrics(REGISTRY)
        reconcile.init(QUEUE_NAME, max_concurrent=options.workers)
        self._m_success = reconcile.total.labels(QUEUE_NAME, "success")
        self._m_requeue_after = reconcile.total.labels(QUEUE_NAME, "requeue_after")
        self._m_error = reconcile.total.labels(QUEUE_NAME, "error")
        self._m_errors = reconcile.errors.labels(QUEUE_NAME)
        self._m_time = reconcile.time.labels(QUEUE_NAME)
        self._m_active = reconcile.active_workers.labels(QUEUE_NAME)
        spec_metrics(REGISTRY).oldest_incomplete.set_function(self._oldest_incomplete)

    def _workload_informer(self, kind: WorkloadKind, namespace: str | None) -> Reflector[WorkloadRecord]:
        return Reflector(
            self._api,
            of_kind(kind),
            transform=partial(kind.record, label_key=self.options.label_key),
            label_selector=self.options.label_key,
            namespace=namespace,
            registry=REGISTRY,
            **_handlers(self._on_workload),
        )

    # Handlers (called by the reflectors; enqueue only). ---------------------

    def _on_workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        self.agent.on_workload(old, new)
        record = new or old
        if record is not None and record.kind == podgroup.KIND and (old is None or new is None):
            # A PodGroup came or went: the workloads whose pods name it serve their keys or not.
            for pod in self.pods.by_index("job", record.key, namespace=record.namespace):
                if pod.job is not None:
                    self._enqueue(pod.job)

    def _on_pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        self.agent.on_pod(old, new)

    def _job_pods(self, key: JobKey) -> list[PodRecord]:
        # A job key is <kind>/<namespace>/<name>; its pods are in its namespace. Pods with
        # resource claims carry what the claims' statuses report (read where a job asks for it).
        pods = self.pods.by_index("job", key, namespace=key.split("/")[1])
        claims = self.claims
        if claims is None:
            return pods
        return [with_claim_networks(p, claims.get) if p.claims else p for p in pods]

    def _on_claim(self, key: str) -> None:
        # A claim's NIC changed: the jobs of the pods using it decide again.
        namespace = key.split("/", 1)[0]
        for pod in self.pods.by_index("claim", key, namespace=namespace):
            for job in pod.job_keys:
                self._enqueue(job)

    def _on_configmap(self, old: ConfigMapRecord | None, new: ConfigMapRecord | None) -> None:
        self.agent.on_configmap(old, new)

    def _node_path(self, name: str) -> Path | None:
        return self.nodes.store.get(name) if self.nodes else None

    def _hypernodes_changed(self) -> None:
        self._hypernode_index = None  # rebuilt on the next lookup

    def _hypernode_path(self, node: str) -> dict[int, str]:
        if self.hypernodes is None:
            return {}
        if self._hypernode_index is None:
            self._hypernode_index = HyperNodeIndex(self.hypernodes.store.list())
        return self._hypernode_index.path(node)

    def _enqueue(self, key: JobKey) -> None:
        # A standby keeps its caches but queues nothing: start_workers
        # enqueues every workload when this process starts leading.
        if self._working:
            self.queue.add(key)

    def _on_runtime(self, old: int | None, new: int | None) -> None:
        # A runtime's numNodes changed: its TrainJobs without numNodes follow.
        trainjobs = self.workloads.get(trainjob.SHORT)
        for record in trainjobs.list() if trainjobs else ():
            if record.runtime_ref is not None:
                self._enqueue(record.key)

    def _workload(self, key: JobKey) -> WorkloadRecord | None:
        # Which workload serves the key is model's rule; the caches are ours.
        found = serving_workload(key, lookup=self._cached_workload, runtime_nodes=self._cached_runtime_nodes)
        if (
            found is not None
            and found.self_register is not False
            and not self.api_available.get("validatingadmissionpolicies", True)
        ):
            # No admission policy fences the launcher's grant: its annotation proves nothing.
            # An explicit False also overrides --self-registration (a job's choice beats the flag).
            return dataclasses.replace(found, self_register=False)
        return found

    def _cached_workload(self, kind: WorkloadKind, key: str) -> WorkloadRecord | None:
        scoped = self.workloads.get(kind.short)
        return scoped.get(key) if scoped else None

    def _cached_runtime_nodes(self, name: str) -> int | None:
        return self.runtimes.store.get(name) if self.runtimes else None

    # Lifecycle. -------------------------------------------------------------------

    @property
    def reflectors(self) -> list[Reflector[Any]]:
        """Every informer of this controller."""
        runtimes = [self.runtimes] if self.runtimes else []
        nodes: list[Reflector[Any]] = [r for r in (self.nodes, self.hypernodes) if r is not None]
        claims = list(self.claims) if self.claims is not None else []
        return [
            *(r for s in self.workloads.values() for r in s),
            *runtimes,
            *nodes,
            *self.pods,
            *self.configmaps,
            *claims,
        ]

    def synced(self) -> bool:
        """True once every informer has listed (the /readyz condition)."""
        return all(r.has_synced.is_set() for r in self.reflectors)

    async def discover(self) -> None:
        """Drop the informers of workload kinds this cluster does not serve.

        A cluster without, say, Kubeflow Trainer has no TrainJob resource: a
        reflector for it would fail its list forever and the caches would never
        sync. Kinds are looked up once, by API discovery (retried while the
        API server is unreachable); a CRD installed later needs a restart.
        """
        served: dict[str, set[str]] = {}
        backoff = Backoff(initial=DISCOVERY_BACKOFF[0], cap=DISCOVERY_BACKOFF[1], jitter=0.0, reset_after=math.inf)
        groups = {f"{k.group}/{k.version}" for k in KINDS} | {gv for api in OPTIONAL_APIS for gv in api.group_versions}
        while True:
            try:
                for gv in sorted(groups):
                    try:
                        body = await kube.get_json(self._api, f"/apis/{gv}", registry=REGISTRY)
                        served[gv] = {str(r.get("name")) for r in body.get("resources") or []}
                    except NotFound:
                        served[gv] = set()
                break
            except Exception as e:  # noqa: BLE001 - unreachable API server: keep trying
                delay = backoff.next_delay()
                log.warning("discovery.failed", error=str(e), retry_in=delay)
                await asyncio.sleep(delay)
        optional = {(api.group_version, api.resource) for api in OPTIONAL_APIS}
        for kind in KINDS:
            if kind.plural not in served.get(f"{kind.group}/{kind.version}", set()):
                del self.workloads[kind.short]
                if (kind.api_version, kind.plural) in optional:
                    continue  # an optional API's kind: its api.unavailable line below says so
                log.warning(
                    "kind.unavailable",
                    kind=kind.kind,
                    api_version=kind.api_version,
                    hint="its CRD is not installed; restart after installing it",
                )
        gauge = api_metrics(REGISTRY).available
        for api in OPTIONAL_APIS:
            version = served_version(api, served)
            available = version is not None
            self.api_available[api.name] = available
            if version is not None:
                self.api_versions[api.name] = version
                if version != api.group_version:
                    log.info("api.version", api=f"{api.resource}.{version}", preferred=api.group_version)
            gauge.labels(api.name).set(1 if available else 0)
            if not available:
                # A warning where the flag asked for what is now off; a note otherwise (most
                # clusters have no HyperNodes, and that is no fault).
                wanted = api.name == "validatingadmissionpolicies" and self.options.self_registration
                (log.warning if wanted else log.info)(
                    "api.unavailable",
                    api=f"{api.resource}.{api.group_version}",
                    off=api.feature,
                    hint=api.hint,
                )
        if not self.api_available["trainingruntimes"]:
            self.runtimes = None
        if not self.api_available["hypernodes"]:
            self.hypernodes = None
        if not self.api_available["resourceclaims"]:
            self.claims = None
        elif self.claims is not None:
            version = self.api_versions["resourceclaims"].rpartition("/")[2]
            for reflector in self.claims:
                reflector.resource = dataclasses.replace(RESOURCE_CLAIMS, version=version)

    async def start_informers(self) -> None:
        """Start every informer and wait until all caches synced."""
        await self.discover()
        self._informers = [asyncio.create_task(r.run(), name=f"informer-{r.resource}") for r in self.reflectors]
        self._informers.append(asyncio.create_task(_sample_loop_lag(), name="loop-lag"))
        await asyncio.gather(*(r.has_synced.wait() for r in self.reflectors))
        log.info(
            "caches.synced",
            workloads=sum(len(s) for s in self.workloads.values()),
            pods=len(self.pods),
            configmaps=len(self.configmaps),
        )

    def start_workers(self) -> None:
        """Start the queue workers (call after ``start_informers``; leaders only).

        Every workload in the cache is queued first: changes seen before this
        (while standing by) were not queued.
        """
        self._working = True
        for scoped in self.workloads.values():
            for record in scoped.list():
                for key in record.job_keys:
                    self.queue.add(key)
        self._workers = [asyncio.create_task(self._work(), name=f"worker-{i}") for i in range(self.options.workers)]
        log.info("workers.started", workers=self.options.workers)

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            started = time.monotonic()
            self._m_active.inc()
            try:
                with structlog.contextvars.bound_contextvars(job=key):
                    result = await self.agent.sync(key)
            except Exception as e:  # noqa: BLE001 - any failure is retried with backoff
                self._m_error.inc()
                self._m_errors.inc()
                retries = self.queue.num_requeues(key)
                log.warning("sync.failed", job=key, error=str(e), error_type=type(e).__name__, retries=retries)
                self.queue.add_rate_limited(key)
            else:
                self.queue.forget(key)
                if result.requeue_after is None:
                    self._m_success.inc()
                else:
                    self._m_requeue_after.inc()
                    self.queue.add_after(key, result.requeue_after)
            finally:
                self._m_active.dec()
                self._m_time.observe(time.monotonic() - started)
                self._note_status(key)
                self.queue.done(key)

    def _note_status(self, key: JobKey) -> None:
        status = self.agent.status(key)
        if status is None or status == STATUS_COMPLETED:
            self._incomplete_since.pop(key, None)
        else:
            self._incomplete_since.setdefault(key, time.monotonic())

    def _oldest_incomplete(self) -> float:
        # Called from a scrape: work on a copy.
        since = list(self._incomplete_since.values())
        return time.monotonic() - min(since) if since else 0.0

    async def stop(self, *, timeout: float, drain: bool = True, abort: asyncio.Future[Any] | None = None) -> None:
        """Stop the workers, then the informers; call once, at the end.

        With ``drain``, queued and in-flight syncs finish first, for at most
        ``timeout`` seconds (then they are cancelled). Without it (leadership
        lost) workers are cancelled at once: a write in flight either reached
        the server or not, and is never followed by another. ``abort`` (the
        lease renewal) ending during the drain cuts it short the same way:
        only a leader may write. Later calls do nothing.
        """
        if self._stopped:
            return
        self._stopped = True
        if self._workers and drain:
            drained = asyncio.ensure_future(self.queue.shutdown_with_drain())
            done, _ = await asyncio.wait(
                {drained, *([abort] if abort else [])}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if drained not in done:
                drained.cancel()
                self.queue.shutdown()
                log.warning("shutdown.cut_short", reason="lease lost" if abort in done else "timeout", timeout=timeout)
        else:
            self.queue.shutdown()
        for task in [*self._workers, *self._informers]:
            task.cancel()
        for task in [*self._workers, *self._informers]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._offload.close()
        log.info("controller.stopped")


async def _sample_loop_lag() -> None:
    """Observe, every :data:`~ringcontroller.metrics.LOOP_LAG_INTERVAL` seconds, how late the loop woke
    (``ringcontroller_event_loop_lag_seconds``); runs until cancelled."""
    metrics = loop_metrics(REGISTRY)
    while True:
        due = time.monotonic() + LOOP_LAG_INTERVAL
        await asyncio.sleep(LOOP_LAG_INTERVAL)
        metrics.observe(max(0.0, time.monotonic() - due))
