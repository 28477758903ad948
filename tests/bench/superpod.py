"""``build/bench.sh --superpod``: rank tables at super-pod scale on the real local control plane.

One row per job shape (``tests.support.superpod``: ``a3-1024x16`` is 1,024
A3 servers of 16 dies, table 1.2; ``a2-2048x8`` table 1.0; ``a5-1024x8`` one
A5 super pod, table 2.0). For each row the bench:

1. creates a fresh namespace and starts ``ring-controller`` as its own process
   watching only it (so its CPU and peak RSS belong to this row);
2. creates the Volcano Job and its pods the way Volcano's job controller does,
   each carrying the device plugin's annotation from the start (kwok's fake
   nodes have no NPUs: the pods leave out the NPU request and the A3 node
   selector the Job's template has, which the controller reads from the Job);
3. waits until every pod is Running and the spec ``completed`` (its own
   watches, :mod:`tests.bench.observer`), and reads the ConfigMap back.

Figures per row:

- ``plain B`` / ``stored B``: the files as plain text, and what the ConfigMap
  holds (gzip in ``binaryData`` when plain would not fit 1 MiB);
- ``render ms``: CPU of the completing decision (``agent.decide.decide`` on
  the same pods, annotations already parsed as the controller has them by
  then: render, validate, compress), measured in the bench process;
- ``ctl cpu ms``: the controller process's CPU from the last pod Running to
  the spec completed (``/proc``);
- ``running->completed ms``: last member Running (the bench's pod watch) to
  the ``completed`` ConfigMap (its ConfigMap watch); ``ctl latency ms``: the
  controller's own figure (``ringcontroller_spec_latency_seconds``: the last
  member seen ready to the write answered);
- ``decode ms``: the launcher's reading function on the ConfigMap as the API
  returns it (base64, gunzip, parse and validate ``cluster.json`` and
  ``hccl.json``, find the member: CPU ms in the bench process), and ``launch
  ms``: a real ``ring-launch --print json`` process on the ConfigMap projected
  the way the kubelet mounts it (wall time, interpreter start included),
  checked to give the last member its rank and a ``RANK_TABLE_FILE`` with
  every device;
- ``RSS MB``: the controller's peak resident set (``VmHWM``);
- ``load``: the machine's 1-minute load average when the spec completed (the
  wall-clock figures stretch with it: on 2 shared cores at load 10 a process
  gets a fifth of a core).

Targets (issue 25): 16,384 NPUs completed <= 1 s after the last member is
Running; decode <= 200 ms; RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from agent.decide import decide
from model.keys import CONFIGMAP_DATA_LIMIT, DEFAULT_LABEL_KEY
from model.pod import pod_record
from model.volcano import workload_record
from ranktable.clusterspec import spec_from_json
from ranktable.hccl import read_hccl
from ranktable.launch.wait import Identity, Judge, Observation, Ready
from ranktable.stored import binary_from_json, files_from_configmap
from ringcontroller.kube import RestKubeAPI
from ringdevcluster import ensure_up
from ringdevcluster.kwok import PODS_PER_NODE
from tests.bench.load import Load, slot_key
from tests.bench.measure import proc_sample
from tests.bench.observer import Observer
from tests.support import superpod
from tests.support.controllerproc import ControllerProcess
from tests.support.kubeletdir import KubeletDir

Json = dict[str, Any]

DEFAULT_ROWS = "a3-24x16,a3-128x16,a3-512x16,a3-1024x16,a5-1024x8"
JOB = "sp"
HEADER = (
    "shape",
    "table",
    "NPUs",
    "plain B",
    "stored B",
    "render ms",
    "ctl cpu ms",
    "running->completed ms",
    "ctl latency ms",
    "decode ms",
    "launch ms",
    "RSS MB",
    "load",
)


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


async def _row(args: argparse.Namespace, cluster: Any, api: ApiClient, name: str) -> Json:
    s = superpod.shape(name)
    rest = RestKubeAPI(api)
    namespace = f"sp-{name}-{secrets.token_hex(3)}".lower()
    load = Load(rest, api_client=api, namespace=namespace, concurrency=args.concurrency, label_key=DEFAULT_LABEL_KEY)
    await load.create_namespace()
    observer = Observer(api=api, namespace=namespace, label_selector=DEFAULT_LABEL_KEY)
    await observer.start()
    configmap = f"rings-config-{JOB}"
    slots = [slot_key(JOB, i) for i in range(s.servers)]
    observer.expect(configmap, slots)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    controller = ControllerProcess(
        kubeconfig=str(cluster.kubeconfig), log_path=logs / f"{namespace}.log", namespace=namespace
    )
    await asyncio.to_thread(controller.start)
    say(f"{name}: namespace {namespace}, controller pid {controller.pid}")
    try:
        job = superpod.workload(s, name=JOB, namespace=namespace, uid="")
        job["metadata"].pop("uid", None)
        job = await rest.request("POST", f"/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs", body=job)
        gate = asyncio.Semaphore(args.concurrency)

        async def create(i: int) -> None:
            async with gate:
                await rest.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=superpod.kwok_pod(s, job, i))

        t0 = time.monotonic()
        await asyncio.gather(*(create(i) for i in range(s.servers)))
        say(f"{name}: {s.servers} pods created in {time.monotonic() - t0:.1f}s")
        # CPU of the controller from the last pod Running: sample it as pods come up, keep the
        # sample taken closest before the last one ran.
        samples: list[tuple[float, float]] = []
        deadline = time.monotonic() + args.timeout
        while observer.completed([configmap]) < 1:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: {observer.running(slots)}/{len(slots)} running, spec not completed")
            samples.append((time.monotonic(), proc_sample(controller.pid).cpu_s))
            await asyncio.sleep(0.02)
        cpu_done = proc_sample(controller.pid).cpu_s
        load_avg = os.getloadavg()[0]
        completion = observer.completions[-1]
        last_running = max(p.running_at for sl in slots if (p := observer.pods.get(sl)) and p.running_at)
        before = [cpu for at, cpu in samples if at <= last_running]
        ctl_cpu_ms = (cpu_done - before[-1]) * 1000 if before else math.nan
        await asyncio.sleep(1.0)  # the touches and events after the write, for the peak RSS
        rss = proc_sample(controller.pid).hwm_mb
        own = await asyncio.to_thread(controller.metric, "ringcontroller_spec_latency_seconds_sum")
        raw = await rest.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{configmap}")
        listed = await rest.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods", query=[("labelSelector", DEFAULT_LABEL_KEY)]
        )
        return {
            "shape": name,
            "npus": s.npus,
            "latency_ms": round(completion.latency_s * 1000, 1) if completion.latency_s is not None else None,
            "controller_latency_ms": round(own * 1000, 1) if own is not None else None,
            "controller_cpu_ms": round(ctl_cpu_ms, 1),
            "controller_rss_mb": round(rss, 1),
            "load_avg_1m": round(load_avg, 1),
            **_sizes(raw),
            **_render(job, listed["items"]),
            **_decode(raw, s),
            **_launch(raw, s),
        }
    finally:
        await observer.stop()
        code = await asyncio.to_thread(controller.stop)
        say(f"{name}: controller exited with {code}; deleting namespace {namespace}")
        try:
            await load.delete_namespace(wait=300.0)
        except Exception as err:  # noqa: BLE001 - the row's figures stand; say what is left behind
            say(f"{name}: namespace {namespace} not deleted: {type(err).__name__}: {err}")


def _sizes(raw: Json) -> Json:
    data = raw.get("data") or {}
    binary = binary_from_json(raw.get("binaryData") or {})
    files = files_from_configmap(raw)
    table = json.loads(files["hccl.json"])
    return {
        "table": table.get("version", "v1"),
        "plain_bytes": sum(len(v.encode()) for v in files.values()),
        "stored_bytes": sum(len(v.encode()) for v in data.values()) + sum(len(b) for b in binary.values()),
        "compressed": bool(binary),
    }


def _render(job: Json, pods: list[Json]) -> Json:
    """CPU ms of the completing decision on these pods, annotations already parsed (as in the controller)."""
    workload = workload_record(job, label_key=DEFAULT_LABEL_KEY)
    records = [pod_record(p) for p in pods]
    decide(workload, records, previous=None)  # parses and caches the annotations
    t0 = time.process_time()
    d = decide(workload, records, previous=None)
    ms = (time.process_time() - t0) * 1000
    assert d.stored is not None and d.spec.status == "completed", d.problems[:2]
    return {"render_ms": round(ms, 1)}


def _decode(raw: Json, s: superpod.Shape) -> Json:
    """CPU ms of the launcher's reading: the API's ConfigMap to a Ready verdict for the last member."""
    text = json.dumps(raw)
    last = f"{JOB}-worker-{s.servers - 1}"
    t0 = time.process_time()
    files = files_from_configmap(json.loads(text))
    verdict = Judge(identity=Identity(pod=last), where="bench").judge(
        Observation(cluster=files["cluster.json"], hccl=files.get("hccl.json"), final=True)
    )
    ms = (time.process_time() - t0) * 1000
    assert isinstance(verdict, Ready) and verdict.member.rank == s.servers - 1
    return {"decode_ms": round(ms, 1)}


def _launch(raw: Json, s: superpod.Shape) -> Json:
    """Wall ms of ``ring-launch --print json`` for the last member on the kubelet-style projection."""
    files: dict[str, str] | dict[str, bytes]
    binary = binary_from_json(raw.get("binaryData") or {})
    files = binary if binary else dict(raw.get("data") or {})
    with tempfile.TemporaryDirectory() as tmp:
        KubeletDir(Path(tmp)).publish(files)
        spec = spec_from_json(files_from_configmap(raw)["cluster.json"])
        env = {**os.environ, "POD_NAME": spec.members[-1].pod, "RING_CONFIG_DIR": tmp, "TMPDIR": tmp}
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "ranktable.launch.launcher", "--timeout", "30", "--print", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        ms = (time.monotonic() - t0) * 1000
        if done.returncode != 0:
            raise RuntimeError(f"ring-launch exited {done.returncode}: {done.stderr[-2000:]}")
        exported = json.loads(done.stdout)
        table = read_hccl(Path(exported["RANK_TABLE_FILE"]).read_text())
        devices = _devices(table)
        if exported.get("RANK_ID") is None or devices != s.npus:
            raise RuntimeError(f"ring-launch exported {exported.get('RANK_ID')!r}, a table of {devices} devices")
    return {"launch_ms": round(ms, 1)}


def _devices(table: Json) -> int:
    if "rank_list" in table:
        return len(table["rank_list"])
    if "group_list" in table:
        return sum(len(i["devices"]) for g in table["group_list"] for i in g["instance_list"])
    return sum(len(server["device"]) for server in table["server_list"])


def _print(rows: list[Json]) -> None:
    cells = [
        [
            r["shape"],
            r["table"],
            f"{r['npus']:,}",
            f"{r['plain_bytes']:,}",
            f"{r['stored_bytes']:,}" + (" gz" if r["compressed"] else ""),
            f"{r['render_ms']:.0f}",
            f"{r['controller_cpu_ms']:.0f}",
            f"{r['latency_ms']:.0f}" if r["latency_ms"] is not None else "-",
            f"{r['controller_latency_ms']:.0f}" if r["controller_latency_ms"] is not None else "-",
            f"{r['decode_ms']:.0f}",
            f"{r['launch_ms']:.0f}",
            f"{r['controller_rss_mb']:.0f}",
            f"{r['load_avg_1m']:.1f}",
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADER)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for c in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)) + " |", flush=True)


async def main_async(args: argparse.Namespace) -> list[Json]:
    names = [n for n in args.rows.split(",") if n]
    most = max(superpod.shape(n).servers for n in names)
    nodes = max(4, math.ceil(most / (PODS_PER_NODE * 0.8)))
    say(f"cluster in {args.state_dir} with at least {nodes} kwok nodes")
    cluster = await asyncio.to_thread(
        ensure_up, state_dir=args.state_dir, nodes=nodes, say=lambda m: say(f"devcluster: {m}")
    )
    cfg = Configuration()
    await kube_config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    rows: list[Json] = []
    async with ApiClient(configuration=cfg) as api:
        for name in names:
            for attempt in range(1, args.attempts + 1):
                try:
                    row = await _row(args, cluster, api, name)
                    break
                except Exception as err:  # a shared dev cluster's API server may restart under a row
                    if attempt == args.attempts:
                        raise
                    say(f"{name}: attempt {attempt} failed ({type(err).__name__}: {err}); again in 20s")
                    await asyncio.sleep(20)
            say(f"{name}: {json.dumps(row)}")
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build/bench.sh --superpod", description=__doc__.split("\n\n")[0])
    parser.add_argument("--superpod", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rows", default=DEFAULT_ROWS, help=f"comma-separated shapes (default {DEFAULT_ROWS})")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("RING_DEVCLUSTER_STATE") or ".state/bench"),
        help="the dev cluster's state directory (default $RING_DEVCLUSTER_STATE, else .state/bench)",
    )
    parser.add_argument("--concurrency", type=int, default=32, help="pod creations in flight")
    parser.add_argument("--logs", type=Path, default=Path(".state/superpod-logs"), help="controller logs go here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per row")
    parser.add_argument("--attempts", type=int, default=3, help="tries per row (a row that fails is run again)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    rows = asyncio.run(main_async(args))
    print(f"limit {CONFIGMAP_DATA_LIMIT:,} bytes; command: build/bench.sh {' '.join(sys.argv[1:])}")
    _print(rows)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "command": sys.argv}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
