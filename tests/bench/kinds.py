"""``build/bench.sh --kinds``: spec latency of the workload kinds whose pods the real controllers make.

For each kind named by ``--kinds`` (``job``: Indexed Jobs, ``sts``:
StatefulSets with ``Parallel`` pod management, ``lws``: LeaderWorkerSets of
one group each, ``pg``: PodGroups of ``--pods`` pods made by hand with the
rank annotation, which the real kube-scheduler gangs; Kubernetes 1.37, so
``RING_DEVCLUSTER_KUBE=1.37``), ``--jobs`` workloads of ``--pods`` members each are created
at once in a fresh namespace watched by a fresh ``ring-controller`` process.
The Job and StatefulSet controllers of the local control plane create the
pods; LeaderWorkerSet pods are created by the bench the way the LWS
controller makes them (the dev cluster has no LWS controller; a CRD of the
tests' own serves the kind). kwok runs every pod.

Latency is measured as ``build/bench.sh`` measures it, on the bench's own
pod and ConfigMap watches (:class:`tests.bench.observer.Observer`): last
member seen Running with an IP -> spec seen ``completed``. ``--json OUT``
writes, per kind, the percentiles (ms), how many completions were measured
and the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from agent.api import Conflict
from model.keys import DEFAULT_LABEL_KEY
from ringcontroller.kube import RestKubeAPI
from ringdevcluster import ensure_up
from ringdevcluster.kwok import PODS_PER_NODE
from tests.bench.load import Load, slot_key
from tests.bench.measure import percentiles
from tests.bench.observer import Observer
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import group_pod, indexed_job, leader_worker_set, lws_pod, pod_group, statefulset

Json = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
KINDS = ("job", "sts", "lws", "pg")
#: Without --kinds: those every supported release serves (PodGroups need 1.37).
DEFAULT_KINDS = ("job", "sts", "lws")
LWS_CRD = REPO / "tests" / "support" / "crds" / "leaderworkersets.yaml"


def say(message: str) -> None:
    """Progress, to stderr."""
    print(f"bench-kinds: {message}", file=sys.stderr, flush=True)


def plans(kind: str, *, jobs: int, pods: int, namespace: str) -> list[tuple[str, Json, list[str]]]:
    """(ConfigMap, workload body, member slots) per workload of ``kind``."""
    out = []
    for j in range(jobs):
        name = f"{kind}-{j}"
        if kind == "job":
            body = indexed_job(name, pods, namespace=namespace)
            out.append((f"rings-config-{name}", body, [slot_key(name, i) for i in range(pods)]))
        elif kind == "sts":
            body = statefulset(name, pods, namespace=namespace)
            out.append((f"rings-config-{name}", body, [f"{name}-{i}" for i in range(pods)]))
        elif kind == "pg":
            body = pod_group(name, pods, namespace=namespace)
            out.append((f"rings-config-{name}", body, [f"{name}-{i}" for i in range(pods)]))
        else:
            body = leader_worker_set(name, replicas=1, size=pods, namespace=namespace)
            slots = [name + "-0" + (f"-{w}" if w else "") for w in range(pods)]
            out.append((f"rings-config-{name}-0", body, slots))
    return out


async def _install_lws_crd(api: RestKubeAPI) -> None:
    body = yaml.safe_load(LWS_CRD.read_text())
    try:
        await api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=body)
    except Conflict:
        pass
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{body['metadata']['name']}"
    for _ in range(600):
        crd = await api.request("GET", path)
        if any(
            c.get("type") == "Established" and c.get("status") == "True" for c in crd["status"].get("conditions") or []
        ):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the LeaderWorkerSet CRD was not established")


async def _create(api: RestKubeAPI, kind: str, namespace: str, body: Json) -> None:
    if kind == "job":
        await api.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=body)
    elif kind == "sts":
        await api.request("POST", f"/apis/apps/v1/namespaces/{namespace}/statefulsets", body=body)
    elif kind == "pg":
        await api.request("POST", f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups", body=body)
        name = body["metadata"]["name"]
        for i in range(body["spec"]["schedulingPolicy"]["gang"]["minCount"]):
            pod = group_pod(name, f"{name}-{i}", rank=i, namespace=namespace)
            pod["metadata"].pop("uid")
            await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
    else:
        path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"
        lws = await api.request("POST", path, body=body)
        size = body["spec"]["leaderWorkerTemplate"]["size"]
        for worker in range(size):
            pod = lws_pod(lws, group=0, worker=worker)
            pod["metadata"].pop("uid")
            pod["metadata"]["ownerReferences"] = [
                {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                 "name": lws["metadata"]["name"], "uid": lws["metadata"]["uid"]}
            ]  # fmt: skip
            await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)


async def run_kind(kind: str, args: argparse.Namespace, *, kubeconfig: Path, cfg: Configuration) -> Json:
    """One kind: create, wait for every spec, measure; the namespace is deleted after."""
    namespace = f"bench-{kind}-{args.jobs}x{args.pods}-{secrets.token_hex(3)}"
    logs = args.state_dir / "bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    async with ApiClient(configuration=cfg) as client:
        api = RestKubeAPI(client)
        load = Load(api, api_client=client, namespace=namespace)
        await load.create_namespace()
        if kind == "lws":
            await _install_lws_crd(api)
        observer = Observer(api=client, namespace=namespace, label_selector=DEFAULT_LABEL_KEY)
        await observer.start()
        planned = plans(kind, jobs=args.jobs, pods=args.pods, namespace=namespace)
        for configmap, _, slots in planned:
            observer.expect(configmap, slots)
        controller = ControllerProcess(
            kubeconfig=str(kubeconfig), log_path=logs / f"{namespace}.log", namespace=namespace
        )
        await asyncio.to_thread(controller.start)
        say(f"{kind}: namespace {namespace}, controller pid {controller.pid}")
        try:
            limit = asyncio.Semaphore(16)

            async def one(body: Json) -> None:
                async with limit:
                    await _create(api, kind, namespace, copy.deepcopy(body))

            await asyncio.gather(*(one(body) for _, body, _ in planned))
            names = [c for c, _, _ in planned]
            waited = await observer.wait(
                lambda: observer.completed(names) == len(names),
                timeout=args.timeout,
                what=f"{len(names)} {kind} specs completed",
                progress=lambda: f"{observer.running()} pods running, {observer.completed(names)} specs completed",
            )
        finally:
            await asyncio.to_thread(controller.stop)
            await observer.stop()
            await load.delete_namespace(wait=0)
    latencies = [c.latency_s * 1000 for c in observer.completions if c.latency_s is not None]
    return {
        "kind": kind,
        "jobs": args.jobs,
        "pods": args.pods,
        "latency_ms": {k: round(v, 1) for k, v in percentiles(latencies).items()},
        "measured": len(latencies),
        "unmeasured": len(observer.completions) - len(latencies),
        "seconds_to_all_completed": round(waited, 1),
        "load_avg_before": round(load_before[0], 1),
        "load_avg_after": round(os.getloadavg()[0], 1),
    }


async def run(args: argparse.Namespace) -> list[Json]:
    """Every kind of ``--kinds``, one after the other, on one cluster."""
    nodes = max(4, math.ceil(args.jobs * args.pods / (PODS_PER_NODE * 0.8)))
    cluster = await asyncio.to_thread(
        ensure_up, state_dir=args.state_dir, nodes=nodes, say=lambda m: say(f"devcluster: {m}")
    )
    cfg = Configuration()
    await kube_config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    return [await run_kind(kind, args, kubeconfig=cluster.kubeconfig, cfg=cfg) for kind in args.kinds]


def table(results: list[Json]) -> str:
    """The figures as a Markdown table (the rows of docs/performance.md)."""
    lines = [
        "| kind | jobs x pods | latency p50 / p90 / p99 / max (ms) | measured | all completed after (s) | load avg |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lat = r["latency_ms"]
        lines.append(
            f"| {r['kind']} | {r['jobs']} x {r['pods']} | {lat.get('p50')} / {lat.get('p90')} / {lat.get('p99')} / "
            f"{lat.get('max')} | {r['measured']} of {r['measured'] + r['unmeasured']} | "
            f"{r['seconds_to_all_completed']} | {r['load_avg_before']}-{r['load_avg_after']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run, print the table, write ``--json``."""
    parser = argparse.ArgumentParser(prog="build/bench.sh --kinds", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kinds", type=lambda s: s.split(","), default=list(DEFAULT_KINDS), help="job,sts,lws (default), pg"
    )
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--state-dir", type=Path, default=Path(os.environ.get("RING_DEVCLUSTER_STATE", ".state/bench")))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; choose from {', '.join(KINDS)}")
    results = asyncio.run(run(args))
    sys.stdout.write(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps({"results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
