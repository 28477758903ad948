"""``build/bench.sh``: ring-controller under load on the real local control plane.

One run is one scenario: ``--jobs J --pods P`` Volcano Jobs (``--devices D``
Ascend devices per pod), optionally followed by ``--churn SECONDS`` of pods
being replaced continuously. ``--jobsets N`` makes N of the J jobs JobSets
instead, spread evenly among the Volcano Jobs (:func:`tests.bench.load.plan_jobs`;
their pods made by the control plane's Job controller, see
:mod:`tests.bench.load`); the figures count both kinds, and ``by_kind`` gives
the latency, ConfigMap writes and touches of each. The run:

1. brings up (or reuses) the local cluster in ``--state-dir`` with enough
   kwok nodes for the pods (250 pods per node at most);
2. creates a fresh namespace and starts ``ring-controller`` as a separate
   process watching only it (so leftovers of other runs cannot leak in);
3. creates the first half of the pods (whole jobs where there are several),
   waits until they run and their specs completed and the controller's
   queue is idle, samples its RSS; then the second half, the same way. The
   RSS slope between the two sizes is ``rss_per_pod_kib``;
4. scrapes ``/metrics`` (ConfigMap writes per job, API requests by verb);
5. with ``--churn``: replaces random pods for the given seconds, then waits
   for every spec to be completed again; with ``--failover ROUNDS`` (the
   controller then runs with leader election beside a standby that has
   listed everything): SIGKILLs the leader, creates a one-member probe job at
   once and times until its spec is seen completed (the new leader took the
   lease, synced every job and wrote), checks that no other job's spec
   changed epoch, and restarts the killed process as the next standby
   (timing its list of the full namespace and its RSS);
6. stops the controller, deletes the namespace, prints the table (stdout)
   and writes ``--json``; ``--compare OLD.json`` prints the deltas, and
   ``--check-targets`` exits 1 when a target of issue 6 is missed.

Latency is measured on watches of the bench's own (:mod:`tests.bench.observer`),
each in a process of its own (the figures of record, ``latency_ms``, from the
first; ``latency_check_ms`` from the second, and how far the two agree),
apart from the load; the observer on the load's loop, which only paces the
run, is reported as ``latency_in_loop_ms`` for comparison.
Progress goes to stderr. ``--profile OUT.prof`` runs the controller under
cProfile (slower: use it to find hot spots, not for the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import resource
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from model.keys import CONFIGMAP_DATA_LIMIT, DEFAULT_LABEL_KEY, DEFAULT_TOUCH_MAX_MEMBERS
from ringcontroller.kube import RestKubeAPI
from ringdevcluster import Cluster, ensure_up
from ringdevcluster.cluster import COMPONENTS
from ringdevcluster.kwok import PODS_PER_NODE
from tests.bench import report
from tests.bench.load import KINDS, JobPlan, Load, mix_of, plan_jobs
from tests.bench.measure import Metrics, histogram_mean, parse_metrics, percentiles, proc_sample
from tests.bench.observer import Observer, ObserverProcess
from tests.support.controllerproc import ControllerProcess

Json = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
QUEUE = "ring-controller"
#: Keep this share of each node's pod capacity free (the scheduler spreads, churn needs room).
NODE_FILL = 0.8


def say(message: str) -> None:
    """A progress line on stderr."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


# -- the run -------------------------------------------------------------------


def _split(plans: list[JobPlan]) -> tuple[dict[str, range], dict[str, range]]:
    """Index ranges per job for the two halves of the pods (whole jobs when there are several)."""
    if len(plans) == 1:
        half = plans[0].pods // 2
        return {plans[0].name: range(half)}, {plans[0].name: range(half, plans[0].pods)}
    cut = len(plans) // 2
    first = {p.name: range(p.pods) for p in plans[:cut]}
    second = {p.name: range(p.pods) for p in plans[cut:]}
    return first, second


async def _scrape(controller: ControllerProcess) -> Metrics:
    return parse_metrics(await asyncio.to_thread(controller.metrics))


async def _quiesce(controller: ControllerProcess, *, timeout: float = 60.0) -> None:
    """Wait until the controller's queue is empty and no sync runs, twice in a row."""
    deadline = time.monotonic() + timeout
    idle = 0
    while idle < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("the controller's work queue did not drain")
        m = await _scrape(controller)
        busy = m.sum("workqueue_depth", name=QUEUE) + m.sum("controller_runtime_active_workers", controller=QUEUE)
        idle = idle + 1 if busy == 0 else 0
        await asyncio.sleep(0.2)


async def _wait_settled(
    observer: Observer, load: Load, plans: list[JobPlan], *, slots: list[str], what: str, timeout: float
) -> float:
    """Wait until the pods of ``slots`` run and every job in ``plans`` that has all its pods is
    completed or has a SpecTooLarge event; returns the seconds it took."""
    configmaps = [p.configmap for p in plans]
    too_large: set[str] = set()
    last_poll = 0.0

    def progress() -> str:
        return (
            f"{observer.running(slots)}/{len(slots)} pods running, "
            f"{observer.completed(configmaps)}/{len(configmaps)} specs completed, {len(too_large)} too large"
        )

    started = time.monotonic()
    await observer.wait(
        lambda: observer.running(slots) == len(slots), timeout=timeout, what=f"{what}: pods running", progress=progress
    )
    while True:
        pending = [c for c in configmaps if observer.status.get(c) != "completed" and c not in too_large]
        if not pending:
            break
        if time.monotonic() - last_poll > 1.0:
            last_poll = time.monotonic()
            for event in await load.events_with_reason("SpecTooLarge"):
                too_large.add("rings-config-" + str((event.get("involvedObject") or {}).get("name", "")))
            continue
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out waiting for {what}: {progress()}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def _machine(load_start: tuple[float, float, float]) -> Json:
    return {
        "cpus": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
    }


async def run(args: argparse.Namespace) -> Json:
    """Run one scenario (see the module doc) and return the result document."""
    load_start = os.getloadavg()
    plans = plan_jobs(jobs=args.jobs, pods=args.pods, devices=args.devices, jobsets=args.jobsets)
    total = args.jobs * args.pods
    nodes = max(4, math.ceil(total / (args.pods_per_node or PODS_PER_NODE * NODE_FILL)))
    say(f"cluster in {args.state_dir} with {nodes} kwok nodes")
    cluster = await asyncio.to_thread(
        ensure_up, state_dir=args.state_dir, nodes=nodes, kube=args.kube, say=lambda m: say(f"devcluster: {m}")
    )
    cfg = Configuration()
    await kube_config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    name = (
        f"{args.jobs}x{args.pods}"
        + (f"-d{args.devices}" if args.devices else "")
        + (f"-js{args.jobsets}" if args.jobsets else "")
        + (f"-churn-{args.churn_mode}" if args.churn else "")
        + (f"-q{args.create_qps:g}" if args.create_qps else "")
    )
    namespace = f"bench-{name}-{secrets.token_hex(3)}".lower()
    logs = args.state_dir / "bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    async with ApiClient(configuration=cfg) as api:
        rest = RestKubeAPI(api)
        load = Load(
            rest,
            api_client=api,
            namespace=namespace,
            concurrency=args.concurrency,
            create_qps=args.create_qps,
            label_key=DEFAULT_LABEL_KEY,
        )
        await load.create_namespace()
        say(f"namespace {namespace}")
        observer = Observer(api=api, namespace=namespace, label_selector=DEFAULT_LABEL_KEY)
        await observer.start()
        for plan in plans:
            observer.expect(plan.configmap, plan.slots())
        apart = [
            ObserverProcess(
                kubeconfig=cluster.kubeconfig,
                namespace=namespace,
                label_selector=DEFAULT_LABEL_KEY,
                expect={p.configmap: p.slots() for p in plans},
                work=logs / f"{namespace}-observer{i}",
            )
            for i in range(2)
        ]
        for process in apart:
            await process.start()
        say(f"observers apart from the load: pids {[p.pid for p in apart]}")
        controller = ControllerProcess(
            kubeconfig=str(cluster.kubeconfig),
            log_path=logs / f"{namespace}.log",
            namespace=namespace,
            extra=[*(args.controller_arg or []), *_election(args, namespace)],
            command=[sys.executable, "-m", "tests.bench.profiled", str(args.profile)] if args.profile else None,
        )
        await asyncio.to_thread(controller.start)
        say(f"controller pid {controller.pid} ready; log {controller.log_path}")
        try:
            return await _measure(
                args,
                plans=plans,
                load=load,
                observer=observer,
                controller=controller,
                name=name,
                load_start=load_start,
                cluster=cluster,
                api=api,
                apart=apart,
            )
        finally:
            await observer.stop()
            for process in apart:
                process.kill()
            code = await asyncio.to_thread(controller.stop)
            say(f"controller exited with {code}")
            if not args.keep:
                say(f"deleting namespace {namespace}")
                try:  # a failed clean-up must not lose the figures
                    gone = await load.delete_namespace(wait=300.0)
                except Exception as e:  # noqa: BLE001 - reported, the run's result stands
                    say(f"deleting namespace {namespace} failed: {type(e).__name__}: {e}")
                else:
                    say("namespace deleted" if gone else f"namespace {namespace} still terminating; not waiting longer")


async def _measure(
    args: argparse.Namespace,
    *,
    plans: list[JobPlan],
    load: Load,
    observer: Observer,
    controller: ControllerProcess,
    name: str,
    load_start: tuple[float, float, float],
    cluster: Cluster,
    api: ApiClient,
    apart: list[ObserverProcess],
) -> Json:
    total = args.jobs * args.pods
    timeout = 120.0 + 0.25 * total
    at_ready = proc_sample(controller.pid)
    m_start = await _scrape(controller)
    cpu_start = _cpu_by_process(cluster, controller)
    apiserver_start = await _apiserver_metrics(api)
    rss_samples: list[Json] = [{"pods": 0, "rss_mb": round(at_ready.rss_mb, 2)}]
    depths: list[float] = []
    sampling = asyncio.create_task(_sample_depth(controller, depths))
    timings: dict[str, float] = {}
    started = time.monotonic()
    started_wall = time.time()
    created: list[str] = []
    for half, members in enumerate(_split(plans), start=1):
        these = [p for p in plans if p.name in members]
        names = [n for p in these for n in p.slots(members[p.name])]
        say(f"half {half}: creating {len(these)} job(s), {len(names)} pods")
        t0 = time.monotonic()
        await load.create_jobs(these, members=members)
        timings[f"create_half{half}"] = round(time.monotonic() - t0, 2)
        created += names
        have = set(created)
        complete = [p for p in plans if all(n in have for n in p.slots())]
        await _wait_settled(observer, load, complete, slots=created, what=f"half {half}", timeout=timeout)
        await _quiesce(controller, timeout=60.0 + 0.1 * total)  # a sync touching every member holds a worker
        sample = proc_sample(controller.pid)
        rss_samples.append({"pods": len(created), "rss_mb": round(sample.rss_mb, 2)})
        say(
            f"half {half} settled: {len(created)} pods tracked, controller RSS {sample.rss_mb:.1f} MiB, cpu {sample.cpu_s:.1f}s"
        )
    touching = "--no-touch-pods" not in (args.controller_arg or [])
    ceiling = _touch_ceiling(args.controller_arg or [])
    if touching:
        await _wait_touched(observer, [p for p in plans if p.pods <= ceiling], timeout=timeout)
    timings["all_settled"] = round(time.monotonic() - started, 2)
    sampling.cancel()
    after_load = proc_sample(controller.pid)
    m_load = (await _scrape(controller)).delta(m_start)
    cpu_load = _cpu_by_process(cluster, controller)
    apiserver_load = (await _apiserver_metrics(api)).delta(apiserver_start)
    too_large = await load.events_with_reason("SpecTooLarge")

    events: Json | None = None
    if args.churn:
        for process in apart:
            process.set_phase("churn")
        events = await _churn(args, plans=plans, load=load, observer=observer, controller=controller, cluster=cluster)
    end = proc_sample(controller.pid)
    m_end = await _scrape(controller)  # since start: the initial lists and watches count too
    lease_log = controller.log_path.read_text(errors="replace").splitlines() if args.failover else []
    record, check = [await process.stop() for process in apart]
    failover: Json | None = None
    if args.failover:
        failover = await _failover(args, plans=plans, load=load, observer=observer, controller=controller)
    if events is not None:
        events["latency_ms"] = _latency_figures(record, "churn")
        events["latency_in_loop_ms"] = {k: round(v, 2) for k, v in percentiles(_in_loop(observer, "churn")).items()}

    latency = _latency_figures(record, "initial")
    (a, b) = rss_samples[1], rss_samples[2]
    slope = (b["rss_mb"] - a["rss_mb"]) * 1024 / (b["pods"] - a["pods"]) if b["pods"] > a["pods"] else None
    writes = m_load.sum("ringcontroller_configmap_writes_total")
    controller_latency = histogram_mean(m_load, "ringcontroller_spec_latency_seconds")
    result: Json = {
        "schema": report.SCHEMA_VERSION,
        "scenario": {
            "name": name,
            "jobs": args.jobs,
            "pods": args.pods,
            "devices": args.devices,
            "mix": mix_of(plans),
            "churn_s": args.churn or None,
            "churn_mode": args.churn_mode if args.churn else None,
            "create_qps": args.create_qps or None,
            "touch_max_members": _touch_ceiling(args.controller_arg or []),
            "pods_per_node": args.pods_per_node or PODS_PER_NODE * NODE_FILL,
            "command": " ".join(["build/bench.sh", *sys.argv[1:]]),
        },
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started_wall)),
        "kube": cluster.versions.get("kube"),
        "latency_ms": latency,
        "latency_check_ms": _latency_figures(check, "initial"),
        "latency_agreement": _agreement(latency, _latency_figures(check, "initial")),
        "by_kind": by_kind_figures(record, check, plans, m_load),
        "latency_in_loop_ms": {k: round(v, 2) for k, v in percentiles(_in_loop(observer, "initial")).items()},
        "controller_cpu_s": round(after_load.cpu_s - at_ready.cpu_s, 2),
        "controller_rss_mb": round(end.hwm_mb, 1),
        "rss_per_pod_kib": round(slope, 2) if slope is not None else None,
        "configmap_writes_per_job": round(writes / len(plans), 3),
        "api_requests": {
            k: int(v) for k, v in sorted(m_end.by_label("ringcontroller_api_requests_total", "verb").items())
        },
        "events_per_s": events["per_s"] if events else None,
        "controller_latency_mean_ms": round(controller_latency * 1000, 2) if controller_latency is not None else None,
        "controller_cpu_total_s": round(end.cpu_s, 2),
        "controller_queue": _queue_figures(m_load),
        "loop_lag": loop_lag_figures(m_end),
        "queue_depth": {"max": int(max(depths, default=0)), "samples": len(depths), "every_s": DEPTH_EVERY_S},
        "cpu_s": {k: round(v - cpu_start.get(k, 0.0), 2) for k, v in cpu_load.items()},
        "apiserver_ms": _apiserver_figures(apiserver_load),
        "apiserver_writes": _apiserver_writes(apiserver_load),
        "controller_writes_per_job": {
            k: round(v / len(plans), 2)
            for k, v in sorted(m_load.by_label("ringcontroller_api_requests_total", "verb").items())
            if k in ("create", "update", "patch", "delete") and v
        },
        "touch": _touch_figures(record, plans, m_load, apiserver_load) if touching else None,
        "configmap_writes": _writes_by_verb_and_result(m_load),
        "rss_samples": rss_samples,
        "lease": lease_figures(m_end, lease_log) if args.failover else None,
        "spec": {
            "max_bytes": max([*observer.sizes.values(), _too_large_bytes(too_large) or 0]),
            "limit_bytes": CONFIGMAP_DATA_LIMIT,
            "completed_jobs": sum(1 for p in plans if observer.completed_epoch.get(p.configmap) is not None),
            "too_large_events": len(too_large),
            "too_large_bytes": _too_large_bytes(too_large),
        },
        "events": events,
        "failover": failover,
        "timings_s": timings,
        "bench_cpu_s": round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 2),
        "machine": _machine(load_start),
    }
    result["targets"] = [t.as_json() for t in report.evaluate_targets(result)]
    return result


def _cpu_by_process(cluster: Cluster, controller: ControllerProcess) -> dict[str, float]:
    """CPU seconds so far of the controller, each control-plane process and the bench."""
    out = {
        "ring-controller": proc_sample(controller.pid).cpu_s,
        "bench": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
    }
    for component in COMPONENTS:
        pid = cluster.pid(component)
        if pid is not None:
            try:
                out[component] = proc_sample(pid).cpu_s
            except OSError:
                pass
    return out


_APISERVER_SERIES = (
    "apiserver_request_duration_seconds_sum",
    "apiserver_request_duration_seconds_count",
    "apiserver_request_total",
)
#: The verbs that write (the API server's own names in ``apiserver_request_total``).
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


async def _apiserver_metrics(api: ApiClient) -> Metrics:
    """The API server's request-duration sums and counts (its /metrics, admin credentials)."""
    response = await api.call_api(
        "/metrics", "GET", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"], _preload_content=False
    )
    try:
        text = await response.text()
    finally:
        response.release()
    return parse_metrics("\n".join(line for line in text.splitlines() if line.startswith(_APISERVER_SERIES)))


def _apiserver_figures(m: Metrics) -> dict[str, float | None]:
    """Mean server-side duration (ms) of the requests that matter here, by verb and resource."""
    out: dict[str, float | None] = {}
    for verb, resource_name, sub in (
        ("POST", "pods", ""),
        ("PATCH", "pods", ""),
        ("PATCH", "pods", "status"),
        ("POST", "pods", "binding"),
        ("POST", "configmaps", ""),
        ("PUT", "configmaps", ""),
        ("POST", "events", ""),
    ):
        match = {"verb": verb, "resource": resource_name, "subresource": sub}
        count = m.sum("apiserver_request_duration_seconds_count", **match)
        total = m.sum("apiserver_request_duration_seconds_sum", **match)
        label = f"{verb} {resource_name}" + (f"/{sub}" if sub else "")
        out[label] = round(total / count * 1000, 2) if count else None
    return out


def _apiserver_writes(m: Metrics) -> dict[str, int]:
    """Writes the API server answered, by ``VERB resource[/subresource]`` (every client: the bench's creates,
    kwok's status patches, the scheduler's bindings, the controller's writes)."""
    out: dict[str, int] = {}
    for (name, labels), value in m.samples.items():
        if name != "apiserver_request_total" or not value:
            continue
        tags = dict(labels)
        if tags.get("verb") not in WRITE_VERBS:
            continue
        key = f"{tags['verb']} {tags.get('resource', '')}" + (
            f"/{tags['subresource']}" if tags.get("subresource") else ""
        )
        out[key] = out.get(key, 0) + int(value)
    return dict(sorted(out.items()))


async def _wait_touched(observer: Observer, plans: list[JobPlan], *, timeout: float) -> None:
    """Wait until every member of each completed job shows its completion's epoch (the controller's touch)."""
    wanted = {p.configmap: len(p.slots()) for p in plans}

    def missing() -> int:
        latest = {c.configmap: c for c in observer.completions}
        return sum(n - len(observer.touches(latest[cm])) for cm, n in wanted.items() if cm in latest)

    await observer.wait(
        lambda: missing() == 0, timeout=timeout, what="touches", progress=lambda: f"{missing()} pods untouched"
    )


def _touch_ceiling(controller_args: list[str]) -> int:
    """The controller's ``--touch-max-members`` as the bench starts it (its default when not given)."""
    value = DEFAULT_TOUCH_MAX_MEMBERS
    for i, arg in enumerate(controller_args):
        if arg.startswith("--touch-max-members="):
            value = int(arg.partition("=")[2])
        elif arg == "--touch-max-members" and i + 1 < len(controller_args):
            value = int(controller_args[i + 1])
    return value


def _latency_figures(observed: Json, phase: str) -> Json:
    """p50/p90/p99/max (ms) of an observer process's completions of ``phase``, with the count and the unmeasured."""
    completions = [c for c in observed["completions"] if c["phase"] == phase]
    latencies = [c["latency_s"] * 1000 for c in completions if c["latency_s"] is not None]
    return {
        **{k: round(v, 2) for k, v in percentiles(latencies).items()},
        "count": len(latencies),
        "unmeasured": sum(1 for c in completions if c["latency_s"] is None),
    }


def by_kind_figures(record: Json, check: Json, plans: list[JobPlan], m_load: Metrics) -> Json:
    """Per workload kind in the run (:data:`tests.bench.load.KINDS` order): its jobs, the latency of its initial
    completions seen by each observer process apart, its ConfigMap writes per job and its pod touches
    (the controller's counters by ``kind`` label, over the load)."""
    kind_of = {p.configmap: p.kind for p in plans}
    mix = mix_of(plans)
    out: Json = {}
    for kind in KINDS:
        if not mix[kind]:
            continue

        def mine(observed: Json, kind: str = kind) -> Json:
            return {
                **observed,
                "completions": [c for c in observed["completions"] if kind_of.get(c["configmap"]) == kind],
            }

        latency = _latency_figures(mine(record), "initial")
        check_latency = _latency_figures(mine(check), "initial")
        writes = m_load.sum("ringcontroller_configmap_writes_total", kind=kind)
        observed = m_load.sum("ringcontroller_spec_latency_seconds_count", kind=kind)
        controller_latency = (
            m_load.sum("ringcontroller_spec_latency_seconds_sum", kind=kind) / observed if observed else None
        )
        out[kind] = {
            "jobs": mix[kind],
            "latency_ms": latency,
            "latency_check_ms": check_latency,
            "latency_agreement": _agreement(latency, check_latency),
            "configmap_writes_per_job": round(writes / mix[kind], 3),
            "controller_latency_mean_ms": None if controller_latency is None else round(controller_latency * 1000, 2),
            "pod_touches_ok": int(m_load.sum("ringcontroller_pod_touches_total", kind=kind, result="ok")),
        }
    return out


def _in_loop(observer: Observer, phase: str) -> list[float]:
    return [c.latency_s * 1000 for c in observer.completions if c.phase == phase and c.latency_s is not None]


#: How far the two observer processes may differ for the figures to count as agreeing.
AGREEMENT = 0.20


def _agreement(record: Json, check: Json) -> Json:
    """How far two observers' percentiles differ (relative to the larger), and whether within :data:`AGREEMENT`."""
    out: Json = {}
    for key in ("p50", "p99"):
        a, b = record.get(key), check.get(key)
        out[key] = round(abs(a - b) / max(a, b), 3) if a is not None and b is not None and max(a, b) > 0 else None
    out["within"] = AGREEMENT
    out["agree"] = all(v is not None and v <= AGREEMENT for k, v in out.items() if k in ("p50", "p99"))
    return out


def _writes_by_verb_and_result(metrics: Metrics) -> dict[str, int]:
    """``{"verb/result": count}`` of the ConfigMap writes, summed over the workload kinds."""
    out: dict[str, int] = {}
    for (name, labels), v in sorted(metrics.samples.items(), key=lambda kv: sorted(kv[0][1])):
        if name == "ringcontroller_configmap_writes_total" and v:
            key = f"{dict(labels)['verb']}/{dict(labels)['result']}"
            out[key] = out.get(key, 0) + int(v)
    return out


def _touch_figures(observed: Json, plans: list[JobPlan], m_load: Metrics, apiserver_load: Metrics) -> Json:
    """The controller's touches after each initial completion: when the members showed the epoch, what it cost
    (times from an observer process)."""
    completions = [c for c in observed["completions"] if c["phase"] == "initial"]
    per_job: list[list[float]] = [c["touches"] for c in completions]
    delays = [d for job in per_job for d in job]
    lasts = [max(job) for job in per_job if job]
    touched = sum(len(job) for job in per_job)
    ok = m_load.sum("ringcontroller_pod_touches_total", result="ok")
    patches = m_load.sum("ringcontroller_api_requests_total", verb="patch")
    server_patches = apiserver_load.sum("apiserver_request_total", verb="PATCH", resource="pods", subresource="")
    return {
        "members": sum(len(p.slots()) for p in plans),
        "touched": touched,
        "delay_ms": {k: round(v * 1000, 1) for k, v in percentiles(delays, (50, 90, 99)).items()} if delays else None,
        "first_ms": round(min(delays) * 1000, 1) if delays else None,
        "last_ms": round(max(lasts) * 1000, 1) if lasts else None,
        "pods_per_s": round(touched / max(lasts), 1) if lasts and max(lasts) > 0 else None,
        "controller_touches_ok": int(ok),
        "controller_touches_skipped": int(m_load.sum("ringcontroller_pod_touches_total", result="skipped")),
        "controller_patches": int(patches),
        "apiserver_pod_patches": int(server_patches),
        "apiserver_pod_patches_per_job": round(server_patches / len(completions), 1) if completions else None,
    }


def lease_figures(m: Metrics, log_lines: list[str]) -> Json:
    """The leader's Lease renewals through the load: how many, their mean and the
    slowest (the ``leader.renew_slow`` lines), failed attempts, and whether the
    lease was lost (``leader.lost``)."""
    count = m.sum("ringcontroller_lease_renewal_seconds_count")
    total = m.sum("ringcontroller_lease_renewal_seconds_sum")
    slow: list[Json] = []
    failed: list[Json] = []
    lost: list[str] = []
    for line in log_lines:
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        event = entry.get("event")
        if event == "leader.renew_slow":
            slow.append(entry)
        elif event == "leader.renew_failed":
            failed.append(entry)
        elif event == "leader.lost":
            lost.append(str(entry.get("reason")))
    return {
        "renewals": int(count),
        "mean_s": round(total / count, 3) if count else None,
        "slow": len(slow),
        "slowest_s": max((float(e.get("seconds", 0.0)) for e in slow), default=None),
        "least_left_s": min((float(e.get("left", 0.0)) for e in slow), default=None),
        "woke_late_max_s": max((float(e.get("woke_late", 0.0)) for e in slow + failed), default=None),
        "failed_attempts": len(failed),
        "lost": lost,
    }


def _queue_figures(m: Metrics) -> Json:
    """Where a job's time goes inside the controller: waiting in the queue, syncing."""
    wait = histogram_mean(m, "workqueue_queue_duration_seconds")
    work = histogram_mean(m, "workqueue_work_duration_seconds")
    return {
        "adds": int(m.sum("workqueue_adds_total", name=QUEUE)),
        "syncs": int(m.sum("controller_runtime_reconcile_total", controller=QUEUE)),
        "sync_errors": int(m.sum("controller_runtime_reconcile_errors_total", controller=QUEUE)),
        "wait_mean_ms": round(wait * 1000, 2) if wait is not None else None,
        "sync_mean_ms": round(work * 1000, 2) if work is not None else None,
    }


#: Seconds between two samples of the controller's ``workqueue_depth`` during the load.
DEPTH_EVERY_S = 2.0


async def _sample_depth(controller: ControllerProcess, depths: list[float]) -> None:
    """Append the controller's queue depth to ``depths`` every :data:`DEPTH_EVERY_S` until cancelled."""
    while True:
        with contextlib.suppress(OSError, ValueError):
            depths.append((await _scrape(controller)).sum("workqueue_depth", name=QUEUE))
        await asyncio.sleep(DEPTH_EVERY_S)


def loop_lag_figures(m: Metrics) -> Json:
    """How long the controller's event loop was held (``ringcontroller_event_loop_lag_seconds``, since its start):
    the largest lag, and the samples later than 0.5 s and 1 s."""
    count = m.sum("ringcontroller_event_loop_lag_seconds_count")
    if not count:
        return {"max_s": None, "samples": 0, "over_0_5_s": None, "over_1_s": None}
    return {
        "max_s": round(m.sum("ringcontroller_event_loop_lag_max_seconds"), 3),
        "samples": int(count),
        "over_0_5_s": int(count - m.sum("ringcontroller_event_loop_lag_seconds_bucket", le="0.5")),
        "over_1_s": int(count - m.sum("ringcontroller_event_loop_lag_seconds_bucket", le="1.0")),
    }


def _too_large_bytes(events: list[Json]) -> int | None:
    for event in events:
        m = re.search(r"is (\d+) bytes", str(event.get("message", "")))
        if m:
            return int(m.group(1))
    return None


async def _churn(
    args: argparse.Namespace,
    *,
    plans: list[JobPlan],
    load: Load,
    observer: Observer,
    controller: ControllerProcess,
    cluster: Cluster,
) -> Json:
    """Churn pods for ``args.churn`` seconds; measure events handled and the settle time."""
    observer.phase = "churn"
    m0 = await _scrape(controller)
    p0 = proc_sample(controller.pid)
    cpu0 = _cpu_by_process(cluster, controller)
    events0 = observer.pod_events
    say(f"churn: {args.churn_mode} pods for {args.churn}s with {args.churn_workers} workers")
    result = await load.churn(
        seconds=args.churn, workers=args.churn_workers, rng=random.Random(args.seed), mode=args.churn_mode
    )
    p1 = proc_sample(controller.pid)
    cpu1 = _cpu_by_process(cluster, controller)
    m1 = (await _scrape(controller)).delta(m0)
    offered = observer.pod_events - events0
    say(
        f"churn: {result.replaced} pods churned ({args.churn_mode}), {offered} pod events; errors {result.errors or 'none'}; settling"
    )
    t0 = time.monotonic()
    await asyncio.sleep(1.0)
    restored = await load.restore()
    all_slots = [n for p in plans for n in p.slots()]
    settled = await _wait_settled(observer, load, plans, slots=all_slots, what="settle after churn", timeout=300.0)
    await _quiesce(controller)
    settle_s = time.monotonic() - t0
    # Events the controller's informer handled, by its own counter when it
    # exports one; else the bench's count on an identical watch (same
    # namespace and selector), valid because the controller settled.
    counter = "ringcontroller_watch_events_total"
    if m1.has(counter):
        handled = sum(m1.sum(counter, resource="pods", type=t) for t in ("ADDED", "MODIFIED", "DELETED"))
        source = counter + '{resource="pods",type=~"ADDED|MODIFIED|DELETED"}'
    else:
        handled, source = float(offered), "bench pod watch (same selector); controller settled after"
    cpu = p1.cpu_s - p0.cpu_s
    return {
        "per_s": round(handled / result.seconds, 1),
        "handled": int(handled),
        "offered": offered,
        "source": source,
        "seconds": round(result.seconds, 2),
        "mode": args.churn_mode,
        "replaced": result.replaced,
        "restored": restored,
        "errors": result.errors,
        "controller_cpu_s": round(cpu, 2),
        "controller_cpu_util": round(cpu / result.seconds, 3),
        "per_cpu_s": round(handled / cpu, 1) if cpu > 0 else None,
        "cpu_util": {k: round((v - cpu0.get(k, 0.0)) / result.seconds, 3) for k, v in cpu1.items()},
        "workqueue_adds": int(m1.sum("workqueue_adds_total", name=QUEUE)),
        "syncs": int(m1.sum("controller_runtime_reconcile_total", controller=QUEUE)),
        "configmap_writes": int(m1.sum("ringcontroller_configmap_writes_total")),
        "settle_s": round(max(settle_s, settled), 2),
    }


def _election(args: argparse.Namespace, namespace: str) -> list[str]:
    """The leader-election flags of a ``--failover`` run (none otherwise)."""
    if not args.failover:
        return []
    return ["--leader-elect", "--leader-election-namespace", namespace, "--leader-election-id", "bench"]


def _leading(controller: ControllerProcess) -> bool:
    try:
        return parse_metrics(controller.metrics()).sum("leader_election_master_status") == 1
    except OSError:
        return False


async def _failover(
    args: argparse.Namespace,
    *,
    plans: list[JobPlan],
    load: Load,
    observer: Observer,
    controller: ControllerProcess,
) -> Json:
    """Kill the leader ``args.failover`` times beside a standby (see the module doc); the figures."""
    ready_timeout = 120.0 + 0.05 * args.jobs * args.pods
    standby = ControllerProcess(
        kubeconfig=controller.kubeconfig,
        log_path=controller.log_path.with_suffix(".standby.log"),
        namespace=controller.namespace,
        extra=list(controller.extra),
    )
    listed: list[float] = []
    t0 = time.monotonic()
    await asyncio.to_thread(standby.start, ready_timeout=ready_timeout)
    listed.append(time.monotonic() - t0)
    standby_rss = [proc_sample(standby.pid).rss_mb]
    leader, other = (controller, standby) if _leading(controller) else (standby, controller)
    before = dict(observer.completed_epoch)
    rounds: list[Json] = []
    for n in range(args.failover):
        probe = JobPlan(name=f"failover-{n}", pods=1)
        observer.expect(probe.configmap, probe.slots())
        say(f"failover {n + 1}/{args.failover}: SIGKILL leader pid {leader.pid}")
        killed = time.monotonic()
        leader.send(9)
        await load.create_jobs([probe])
        took_lease: float | None = None
        while observer.status.get(probe.configmap) != "completed":
            if took_lease is None and await asyncio.to_thread(_leading, other):
                took_lease = time.monotonic() - killed
            if time.monotonic() - killed > 300:
                raise TimeoutError(f"failover {n + 1}: no completed probe spec after 300 s")
            await asyncio.sleep(0.05)
        first_spec = time.monotonic() - killed
        if took_lease is None:
            took_lease = first_spec  # the spec was seen before a metrics poll showed the lease
        lag = loop_lag_figures(parse_metrics(await asyncio.to_thread(other.metrics)))
        await asyncio.to_thread(leader.stop, 9)
        t1 = time.monotonic()
        await asyncio.to_thread(leader.start, ready_timeout=ready_timeout)
        listed.append(time.monotonic() - t1)
        standby_rss.append(proc_sample(leader.pid).rss_mb)
        rounds.append(
            {"lease_s": round(took_lease, 2), "first_spec_s": round(first_spec, 2), "new_leader_loop_lag": lag}
        )
        say(f"failover {n + 1}: lease taken after {took_lease:.1f}s, probe spec completed after {first_spec:.1f}s")
        leader, other = other, leader
    changed = {
        cm: (epoch, observer.completed_epoch.get(cm))
        for cm, epoch in before.items()
        if observer.completed_epoch.get(cm) != epoch
    }
    firsts = sorted(r["first_spec_s"] for r in rounds)
    await asyncio.to_thread(standby.stop)
    return {
        "rounds": rounds,
        "first_spec_s": {"p50": firsts[len(firsts) // 2], "max": firsts[-1]},
        "lease_duration_s": 15.0,
        "epoch_changes": len(changed),
        "changed": {k: list(v) for k, v in list(changed.items())[:10]},
        "standby_list_s": [round(x, 2) for x in listed],
        "standby_rss_mb": [round(x, 1) for x in standby_rss],
    }


# -- command line ----------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags."""
    p = argparse.ArgumentParser(
        prog="build/bench.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="jobs to create (default 1): Volcano Jobs, part of them JobSets with --jobsets",
    )
    p.add_argument(
        "--jobsets",
        type=int,
        default=0,
        metavar="N",
        help="of the --jobs, make N JobSets (default 0: Volcano Jobs only), spread evenly among the Volcano Jobs; "
        "each is one Indexed Job of --pods pods, made as the JobSet controller makes it, its pods made by the "
        "control plane's Job controller; the result's scenario.mix says how many of each, by_kind the figures "
        "per kind (e.g. --jobs 1000 --jobsets 500: half and half). Not with --devices or --churn",
    )
    p.add_argument("--pods", type=int, default=8, help="pods (workers) per job (default 8)")
    p.add_argument(
        "--devices", type=int, default=0, help="Ascend devices per pod (device annotation; runtime ascend-910)"
    )
    p.add_argument(
        "--churn",
        type=float,
        nargs="?",
        const=30.0,
        default=0.0,
        metavar="SECONDS",
        help="after the jobs completed, replace pods continuously for SECONDS (default 30)",
    )
    p.add_argument("--churn-workers", type=int, default=16, help="pods being churned at once (default 16)")
    p.add_argument(
        "--churn-mode",
        choices=("replace", "restart"),
        default="replace",
        help="replace: delete and re-create pods (default); restart: in-place container restarts (status patches)",
    )
    p.add_argument(
        "--failover",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="after the jobs completed, kill the leader ROUNDS times beside a standby (see the module doc)",
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="write the result document here")
    p.add_argument("--compare", type=Path, metavar="OLD.json", help="print the changes against an earlier result")
    p.add_argument("--check-targets", action="store_true", help="exit 1 when a target of issue 6 is missed")
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the local cluster's state directory (default .state/bench, with --kube .state/bench-VERSION)",
    )
    p.add_argument(
        "--kube",
        default=None,
        metavar="VERSION",
        help="the Kubernetes release to run on (1.32, v1.32.13: each one's newest patch on the Go module proxy; "
        "default $RING_DEVCLUSTER_KUBE, else the running cluster's or the pinned one)",
    )
    p.add_argument("--concurrency", type=int, default=16, help="API requests in flight while creating (default 16)")
    p.add_argument(
        "--pods-per-node",
        type=int,
        default=0,
        help=f"kwok nodes for this many pods each (default {PODS_PER_NODE * NODE_FILL:g}); kwok's address pool "
        "does not stop at a node's /24, and at 200 pods a node it handed pod IPs out twice, which gave two "
        "members of a 20,000-member job the same address (the controller then refuses the spec: AddressCollision)",
    )
    p.add_argument(
        "--create-qps",
        type=float,
        default=0.0,
        help="pace Job and pod creation to this many per second (default 0: unpaced)",
    )
    p.add_argument(
        "--controller-arg",
        action="append",
        metavar="ARG",
        help="extra flag for ring-controller (repeatable, e.g. --controller-arg=--workers=8)",
    )
    p.add_argument(
        "--profile", type=Path, metavar="OUT.prof", help="run the controller under cProfile, write the profile here"
    )
    p.add_argument("--keep", action="store_true", help="keep the namespace (and its objects) afterwards")
    p.add_argument("--seed", type=int, default=1, help="random seed of the churn")
    args = p.parse_args(argv)
    if args.state_dir is None:
        args.state_dir = REPO / ".state" / (f"bench-{args.kube}" if args.kube else "bench")
    if args.jobs < 1 or args.pods < 2:
        p.error("--jobs must be at least 1 and --pods at least 2 (the RSS slope needs two sizes)")
    if not 0 <= args.jobsets <= args.jobs:
        p.error("--jobsets must be between 0 and --jobs")
    if args.jobsets and args.jobs < 2:
        p.error("--jobsets needs --jobs 2 or more (a JobSet is created whole: the two RSS sizes need two jobs)")
    if args.jobsets and (args.devices or args.churn):
        p.error(
            "--jobsets cannot be combined with --devices or --churn (the Job controller makes JobSet pods, "
            "from one template, and replaces them itself)"
        )
    if args.churn and args.churn_workers > args.jobs * args.pods // 2:
        p.error("--churn-workers must be at most half the pods")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the bench; 0 on success, 1 when ``--check-targets`` finds a miss."""
    args = parse(argv)
    args.state_dir = args.state_dir.resolve()
    result = asyncio.run(run(args))
    print(report.render_table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        say(f"wrote {args.json}")
    if args.compare:
        old = json.loads(args.compare.read_text())
        print(f"\ncompared with {args.compare} ({old.get('scenario', {}).get('name', '?')}):")
        print(report.render_comparison(report.compare(old, result)))
    if args.profile:
        _print_profile(args.profile)
    missed = [t for t in result["targets"] if not t["met"]]
    if args.check_targets and missed:
        say("targets missed: " + ", ".join(t["name"] for t in missed))
        return 1
    return 0


def _print_profile(path: Path, top: int = 30) -> None:
    import pstats

    if not path.exists():
        say(f"no profile at {path} (did the controller exit cleanly?)")
        return
    stats = pstats.Stats(str(path), stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    sys.exit(main())
