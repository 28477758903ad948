"""The load: Volcano Jobs and JobSets, their pods made the way their controllers make them.

Creation speed is not what the bench measures, so requests run concurrently
(``concurrency`` in flight) on the bench's event loop, raw JSON through
:class:`ringcontroller.kube.RestKubeAPI`. Objects come from
:mod:`tests.factories`: a Job per :class:`JobPlan`, then each of its pods
(name ``<job>-worker-<i>``, Volcano's labels and annotations, a controller
ownerReference to the Job's uid). With ``devices`` the job's runtime is
``ascend-910`` and each pod carries an Ascend device annotation from the
start (no NPU resource request: kwok's fake nodes advertise 8 NPUs each,
which would leave a 1,024-pod job unschedulable).

A plan may be a JobSet instead (``plan_jobs(jobsets=N)``): one replicated
job ``workers`` of one Indexed Job of ``pods`` pods, Kubeflow Trainer's
shape. The bench creates the JobSet and its child Job the way the JobSet
controller makes it (:func:`tests.support.factories.jobset_job`: JobSet's
labels and annotations, a controller ownerReference to the JobSet's uid);
the control plane's own Job controller then makes the pods (name
``<job>-<index>-<random>``, the completion-index label), as in a cluster
running JobSet. A pod of a JobSet cannot be made by hand here: its owner
is a Job, which would make pods of its own, and without the Job the garbage
collector deletes the pod. So a JobSet is created whole (no half of its
pods), and its pods are not churned (the Job controller replaces them).

Churn comes in two modes, each run by ``workers`` coroutines picking random
members continuously:

- ``replace``: the member's pod is deleted at once (grace period 0) and a
  replacement created, as a workload controller replaces a failed pod. Each
  replacement is four pod events (DELETED, ADDED, bound, Running) and takes
  the job's spec back to ``initializing`` and then ``completed``; the
  scheduler's client rate (50 requests/s by default) bounds how fast pods
  are bound again. The replacement gets a fresh name (``<job>-worker-<i>-r<n>``,
  same Volcano labels and annotations, so the same member): kwok acts on
  its stale view of a deleted pod by name, and when names are reused at this
  rate it deletes or stalls on the new pods (seen: no pod patched for four
  minutes after a minute of same-name churn). Members are therefore tracked
  by slot (``<job>/<index>``), not by pod name.
- ``restart``: the pod's container restarts in place, reported the way a
  kubelet reports it (a status patch: ``restartCount`` + 1, ready again).
  One pod event each, which the controller must decode and compare but which
  changes nothing it publishes.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient

from agent.api import ApiError, Conflict, NotFound
from model import jobset as jobset_kind
from model import volcano as volcano_kind
from model.keys import CONFIGMAP_PREFIX, DEFAULT_LABEL_KEY
from ringcontroller.kube import RestKubeAPI
from tests.support.factories import device_annotation, jobset, jobset_job, pod_template, volcano_job, volcano_pod

Json = dict[str, Any]

__all__ = ["JOBSET", "KINDS", "VOLCANO", "ChurnResult", "JobPlan", "Load", "Pacer", "mix_of", "plan_jobs", "slot_key"]

TASK = "worker"
#: The replicated job of a planned JobSet (one Job of all its pods).
REPLICATED_JOB = "workers"
#: The workload kinds a plan can be, by the controller's ``kind`` metric label (:func:`model.kinds.short_name`).
VOLCANO: str = volcano_kind.SHORT
JOBSET: str = jobset_kind.SHORT
KINDS = (VOLCANO, JOBSET)
#: Appended to a JobSet's name, so a name says its kind and names still sort in creation order.
JOBSET_SUFFIX = "-js"


@dataclass(frozen=True)
class JobPlan:
    """One job of the scenario: a Volcano Job (``kind`` :data:`VOLCANO`) of ``pods`` workers with ``devices``
    NPUs each, or a JobSet (:data:`JOBSET`) of one Indexed Job of ``pods`` pods (no devices)."""

    name: str
    pods: int
    devices: int = 0
    kind: str = VOLCANO

    @property
    def configmap(self) -> str:
        """The ConfigMap the controller writes the spec to; the pods mount it, as file-mode launchers do
        (kwok mounts nothing, but the controller touches only pods that mount their spec)."""
        return CONFIGMAP_PREFIX + self.name

    @property
    def member_job(self) -> str:
        """The name in the members' slots: the Volcano Job's, or the JobSet's child Job's
        (``<jobset>-<replicated job>-0``, which the Job controller puts in its pods' labels)."""
        return f"{self.name}-{REPLICATED_JOB}-0" if self.kind == JOBSET else self.name

    def slots(self, indices: Iterable[int] | None = None) -> list[str]:
        """Member slots (``<job>/<index>``, :attr:`member_job`) in rank order; of ``indices`` only, if given."""
        return [slot_key(self.member_job, i) for i in (range(self.pods) if indices is None else indices)]


def slot_key(job: str, index: int | str) -> str:
    """The key of a member, whatever its pod is called: ``<job>/<index>``."""
    return f"{job}/{index}"


def plan_jobs(*, jobs: int, pods: int, devices: int = 0, jobsets: int = 0) -> list[JobPlan]:
    """``jobs`` jobs of ``pods`` pods each, numbered in creation order: ``jobsets`` of them JobSets
    (``bench-<n>-js``), spread evenly among the Volcano Jobs (``bench-<n>``), so that any run of
    consecutive plans (each half of the bench's load) holds both kinds in the same proportion."""
    if not 0 <= jobsets <= jobs:
        raise ValueError(f"jobsets must be 0..{jobs}, got {jobsets}")
    if jobsets and devices:
        raise ValueError("JobSets are planned without devices (their pods come from one template)")
    width = len(str(max(jobs - 1, 0)))
    plans = []
    for i in range(jobs):
        # Job i is a JobSet when the share of JobSets among the first i + 1 jobs steps up there.
        if (i + 1) * jobsets // jobs > i * jobsets // jobs:
            plans.append(JobPlan(name=f"bench-{i:0{width}d}{JOBSET_SUFFIX}", pods=pods, kind=JOBSET))
        else:
            plans.append(JobPlan(name=f"bench-{i:0{width}d}", pods=pods, devices=devices))
    return plans


def mix_of(plans: Iterable[JobPlan]) -> dict[str, int]:
    """Jobs per kind, every kind of :data:`KINDS` named (0 where none)."""
    out = dict.fromkeys(KINDS, 0)
    for plan in plans:
        out[plan.kind] += 1
    return out


def _device_ips(pod: int, devices: int) -> list[tuple[str, str]]:
    # Unique per pod and device, like the per-NPU RoCE addresses of a real fleet.
    return [(str(d), f"10.{d}.{pod // 256 % 256}.{pod % 256}") for d in range(devices)]


@dataclass
class ChurnResult:
    """What a churn run did: replacements made, and failures by reason."""

    replaced: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class Pacer:
    """At most ``rate`` starts per second (0: unlimited), spaced evenly; shared by coroutines."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next = 0.0

    async def wait(self) -> None:
        """Return when the next start is due."""
        if not self._interval:
            return
        now = time.monotonic()
        start = max(now, self._next)
        self._next = start + self._interval
        if start > now:
            await asyncio.sleep(start - now)


class Load:
    """Creates and churns the scenario's objects in ``namespace``; see the module doc.

    ``create_qps`` paces creation (0: as fast as ``concurrency`` allows), the
    way a workload controller's client rate limit would.
    """

    def __init__(
        self,
        api: RestKubeAPI,
        *,
        api_client: ApiClient,
        namespace: str,
        concurrency: int = 16,
        create_qps: float = 0.0,
        label_key: str = DEFAULT_LABEL_KEY,
    ) -> None:
        self.api = api
        self._pacer = Pacer(create_qps)
        self.api_client = api_client
        self.namespace = namespace
        self.label_key = label_key
        self._limit = asyncio.Semaphore(concurrency)
        self.jobs: dict[str, Json] = {}  # name -> the Job as created (with uid)
        self.bodies: dict[str, Json] = {}  # slot -> the body of its current pod

    async def create_namespace(self) -> None:
        """Create the namespace and wait for its default ServiceAccount (pods need it)."""
        await self.api.request(
            "POST",
            "/api/v1/namespaces",
            body={
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.namespace, "labels": {"ring-controller.bench": "true"}},
            },
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                await self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default")
                return
            except NotFound:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def delete_namespace(self, *, wait: float) -> bool:
        """Delete the namespace; wait up to ``wait`` seconds for it to be gone. True if gone.

        Its pods go first, at once (grace period 0): kwok finalizes gracefully deleted pods one by one,
        tens per second on this machine, which left a 20,000-pod namespace terminating for half an hour
        and kwok starting no other pod meanwhile.
        """
        try:
            await self.api.request(
                "DELETE", f"/api/v1/namespaces/{self.namespace}/pods", query=[("gracePeriodSeconds", "0")]
            )
        except NotFound:
            return True
        except (ApiError, TimeoutError):  # thousands of pods can outlast the request (504): the namespace goes anyway
            pass
        try:
            await self.api.request(
                "DELETE", f"/api/v1/namespaces/{self.namespace}", query=[("propagationPolicy", "Background")]
            )
        except NotFound:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                await self.api.request("GET", f"/api/v1/namespaces/{self.namespace}")
            except NotFound:
                return True
            await asyncio.sleep(0.5)
        return False

    async def create_jobs(self, plans: Iterable[JobPlan], *, members: dict[str, range] | None = None) -> None:
        """Create each planned Job (if not yet created) and its pods.

        ``members`` limits the pods created per job name to an index range
        (default: all); a later call creates the rest.
        """

        async def one(plan: JobPlan) -> None:
            indices = members.get(plan.name, range(plan.pods)) if members else range(plan.pods)
            if plan.kind == JOBSET:
                if indices != range(plan.pods):
                    raise ValueError(f"JobSet {plan.name} is created whole, not pods {indices}")
                if plan.name not in self.jobs:
                    await self._create_jobset(plan)
                return
            job = self.jobs.get(plan.name)
            if job is None:
                job = await self._create_job(plan)
            await asyncio.gather(*(self._create_pod(plan, job, i) for i in indices))

        await asyncio.gather(*(one(p) for p in plans))

    async def _create_job(self, plan: JobPlan) -> Json:
        runtime = "ascend-910" if plan.devices else "tensorflow"
        body = volcano_job(
            plan.name,
            namespace=self.namespace,
            tasks=[(TASK, plan.pods)],
            runtime=runtime,
            template=pod_template(runtime=runtime, label_key=self.label_key, configmap=plan.configmap),
            label_key=self.label_key,
        )
        async with self._limit:
            await self._pacer.wait()
            job = await self.api.request(
                "POST", f"/apis/batch.volcano.sh/v1alpha1/namespaces/{self.namespace}/jobs", body=body
            )
        self.jobs[plan.name] = job
        return job

    async def _create_jobset(self, plan: JobPlan) -> None:
        """The JobSet, then its child Job as the JobSet controller makes it; the Job controller makes the pods."""
        body = jobset(
            plan.name,
            namespace=self.namespace,
            replicated=[(REPLICATED_JOB, 1, plan.pods)],
            template=pod_template(label_key=self.label_key, configmap=plan.configmap),
            label_key=self.label_key,
        )
        async with self._limit:
            await self._pacer.wait()
            created = await self.api.request(
                "POST", f"/apis/{jobset_kind.API_VERSION}/namespaces/{self.namespace}/{jobset_kind.PLURAL}", body=body
            )
        self.jobs[plan.name] = created
        child = jobset_job(created, rjob=REPLICATED_JOB, job_index=0)
        async with self._limit:
            await self._pacer.wait()
            await self.api.request("POST", f"/apis/batch/v1/namespaces/{self.namespace}/jobs", body=child)

    async def _create_pod(self, plan: JobPlan, job: Json, index: int) -> None:
        devices = (
            device_annotation(f"172.16.{index // 256 % 256}.{index % 256}", _device_ips(index, plan.devices))
            if plan.devices
            else None
        )
        body = volcano_pod(job, task=TASK, index=index, devices=devices)
        body["metadata"].pop("creationTimestamp", None)
        self.bodies[slot_key(plan.name, index)] = body
        async with self._limit:
            await self._pacer.wait()
            await self.api.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", body=body)

    async def churn(self, *, seconds: float, workers: int, rng: random.Random, mode: str = "replace") -> ChurnResult:
        """Replace or restart random pods for ``seconds`` (see the module doc for ``mode``).

        Each of ``workers`` coroutines owns the pod it is working on, so no
        two touch the same pod at once.
        """
        result = ChurnResult()
        slots = sorted(self.bodies)
        if not 0 < workers <= len(slots) // 2:
            raise ValueError(f"churn workers must be 1..{len(slots) // 2} for {len(slots)} pods, got {workers}")
        busy: set[str] = set()
        counts: dict[str, int] = {}
        deadline = time.monotonic() + seconds
        started = time.monotonic()
        path = f"/api/v1/namespaces/{self.namespace}/pods"

        def count_error(reason: str) -> None:
            result.errors[reason] = result.errors.get(reason, 0) + 1

        async def worker() -> None:
            while time.monotonic() < deadline:
                slot = rng.choice(slots)
                if slot in busy:
                    await asyncio.sleep(0)  # let the others move on
                    continue
                busy.add(slot)
                counts[slot] = counts.get(slot, 0) + 1
                body = self.bodies[slot]
                name = str(body["metadata"]["name"])
                try:
                    if mode == "restart":
                        await self._restart(name, counts[slot])
                        result.replaced += 1
                        continue
                    try:
                        await self.api.request("DELETE", f"{path}/{name}", query=[("gracePeriodSeconds", "0")])
                    except NotFound:
                        count_error("delete_not_found")
                    replacement = copy.deepcopy(body)
                    job, _, index = slot.partition("/")
                    replacement["metadata"]["name"] = f"{job}-{TASK}-{index}-r{counts[slot]}"
                    await self.api.request("POST", path, body=replacement)
                    self.bodies[slot] = replacement
                    result.replaced += 1
                except ApiError as e:
                    count_error(f"http_{e.status}")
                finally:
                    busy.discard(slot)

        await asyncio.gather(*(worker() for _ in range(workers)))
        result.seconds = time.monotonic() - started
        return result

    async def _restart(self, name: str, count: int) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "example.invalid/train:latest",
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": count,
                    "state": {"running": {"startedAt": now}},
                    "lastState": {
                        "terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}
                    },
                }
            ]
        }
        await self.api.request(
            "PATCH",
            f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
            body={"status": status},
            content_type="application/strategic-merge-patch+json",
        )

    async def restore(self) -> int:
        """Create again the current pod of every slot that has none; returns how many."""
        listed = await self.api.request(
            "GET", f"/api/v1/namespaces/{self.namespace}/pods", query=[("labelSelector", self.label_key)]
        )
        present = {str((p.get("metadata") or {}).get("name")) for p in listed.get("items") or []}
        missing = [slot for slot, body in self.bodies.items() if body["metadata"]["name"] not in present]

        async def create(slot: str) -> None:
            async with self._limit:
                try:
                    await self.api.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", body=self.bodies[slot])
                except Conflict:
                    pass

        await asyncio.gather(*(create(s) for s in missing))
        return len(missing)

    async def events_with_reason(self, reason: str) -> list[Json]:
        """Events of the namespace with ``reason`` (e.g. ``SpecTooLarge``)."""
        listed = await self.api.request(
            "GET", f"/api/v1/namespaces/{self.namespace}/events", query=[("fieldSelector", f"reason={reason}")]
        )
        return list(listed.get("items") or [])
