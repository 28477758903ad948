"""The bench's own watches: when pods became countable and when specs completed.

The latency the product promises is measured from outside the controller,
on the API server's watch streams, as a training pod would feel it:

- a pod watch (the controller's label selector, the bench's namespace) notes
  the monotonic time each member's current pod is first seen Running with an
  IP and not being deleted (the contract's "member counts", minus devices,
  which the bench sets at creation). Members are slots ``<job>/<index>`` read
  from Volcano's (or the Job controller's) labels, so a replacement pod with
  another name takes its predecessor's place; other pods are slots by name;
- the same pod watch notes when each pod first shows each value of the
  controller's epoch annotation (``--touch-pods``): :meth:`Observer.touches`
  gives a completion's touch times;
- a ConfigMap watch (the controller's managed label) notes each
  ``cluster.json`` whose ``status`` is ``completed`` with an epoch not seen
  completed before. At that moment the job's latency is
  ``completed_at - max(running_at of its members)``, taken only when every
  member's current incarnation (uid) was seen Running first. The two watch
  streams are not ordered with each other: a completion that arrives before
  the bench saw its last member running has no latency (``None``; counted
  as ``unmeasured`` in the result), rather than a made-up one.

Within one observer both watches run on one event loop, and times are taken
as each event is decoded, so the two streams are compared on one clock with
no thread hand-off. The handlers only record; waiting for conditions is
done by polling (:meth:`Observer.wait`), which keeps each event cheap.

Where it runs decides what it measures. An observer on the bench's own loop
shares it with the load (thousands of creates in flight): an event waits
there behind the load's work before its time is taken, which inflated the
latency 4-6 times (issue 36, item 7). So the figures of record come from
:class:`ObserverProcess`: the same :class:`Observer` in a process of its
own (``python -m tests.bench.observer``), whose loop does nothing but the
two watches. ``time.monotonic`` is the system-wide ``CLOCK_MONOTONIC``, so
its times compare with the bench's. The bench runs two of them and reports
how far they agree; the in-loop observer only paces the run (when to create
the next half, when everything settled).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient

from agent.api import ApiError
from model.keys import (
    EPOCH_ANNOTATION,
    JOB_COMPLETION_INDEX,
    JOB_NAME_LABEL,
    MANAGED_LABEL,
    MANAGED_VALUE,
    VOLCANO_JOB_NAME,
    VOLCANO_TASK_INDEX,
)
from ranktable.clusterspec import CLUSTER_FILE, STATUS_COMPLETED
from ranktable.stored import files_from_configmap
from ringcontroller import kube
from tests.bench.load import slot_key

Json = dict[str, Any]

__all__ = ["Completion", "Observer", "ObserverProcess", "PodSeen"]


@dataclass
class PodSeen:
    """The current pod of a member slot, when it first counted, and when each epoch annotation showed."""

    uid: str
    running_at: float | None = None
    touched_at: dict[str, float] = field(default_factory=dict)  # EPOCH_ANNOTATION value -> first seen


def _slot(meta: Json) -> str:
    """A pod's member slot: ``<job>/<index>`` from Volcano's or the Job controller's labels (their
    replacements have new names), else the pod's name (StatefulSet and LeaderWorkerSet pods keep theirs)."""
    labels = meta.get("labels") or {}
    for job_label, index_label in ((VOLCANO_JOB_NAME, VOLCANO_TASK_INDEX), (JOB_NAME_LABEL, JOB_COMPLETION_INDEX)):
        job, index = labels.get(job_label), labels.get(index_label)
        if job is not None and index is not None:
            return slot_key(str(job), str(index))
    return str(meta.get("name", ""))


@dataclass(frozen=True)
class Completion:
    """A spec seen completed: which ConfigMap, epoch, when, and the latency if known."""

    configmap: str
    epoch: int
    at: float
    latency_s: float | None
    phase: str
    size: int


@dataclass
class Observer:
    """Watches pods and managed ConfigMaps of ``namespace``; see the module doc.

    Protocol: register each job's member pod names with :meth:`expect`
    before creating them; ``start`` before creating anything (it lists, then
    watches from the list's version, so nothing is missed); ``stop`` at the end.
    ``phase`` labels the completions recorded from now on.
    """

    api: ApiClient
    namespace: str
    label_selector: str
    phase: str = "initial"
    pods: dict[str, PodSeen] = field(default_factory=dict)  # slot -> its current pod
    members: dict[str, list[str]] = field(default_factory=dict)  # configmap -> slots
    completions: list[Completion] = field(default_factory=list)
    completed_epoch: dict[str, int] = field(default_factory=dict)  # configmap -> last completed epoch
    status: dict[str, str] = field(default_factory=dict)  # configmap -> current status
    sizes: dict[str, int] = field(default_factory=dict)  # configmap -> bytes of data, latest
    pod_events: int = 0
    configmap_events: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _synced: int = 0

    def expect(self, configmap: str, slots: list[str]) -> None:
        """Register the member slots whose readiness a ConfigMap's completion waits for."""
        self.members[configmap] = slots

    async def start(self) -> None:
        """Start both watches; returns once both have listed."""
        self._tasks = [
            asyncio.create_task(self._watch(kube.PODS, self.label_selector, self._on_pod), name="observe-pods"),
            asyncio.create_task(
                self._watch(kube.CONFIGMAPS, f"{MANAGED_LABEL}={MANAGED_VALUE}", self._on_configmap),
                name="observe-configmaps",
            ),
        ]
        while self._synced < 2:
            for task in self._tasks:
                if task.done():
                    task.result()  # raises what stopped it
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Cancel the watches."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass

    def running(self, slots: list[str] | None = None) -> int:
        """How many of ``slots`` (default: every slot seen) have a counting pod now."""
        if slots is None:
            return sum(1 for p in self.pods.values() if p.running_at is not None)
        return sum(1 for n in slots if (p := self.pods.get(n)) is not None and p.running_at is not None)

    def touches(self, completion: Completion) -> list[float]:
        """Seconds from ``completion`` to each of its members' pods showing its epoch (the controller's
        touch), for the members seen touched so far."""
        slots = self.members.get(completion.configmap) or []
        times = [p.touched_at.get(str(completion.epoch)) for n in slots if (p := self.pods.get(n)) is not None]
        return [t - completion.at for t in times if t is not None]

    def completed(self, configmaps: list[str] | None = None) -> int:
        """How many of ``configmaps`` (default: all expected) show a completed spec now."""
        names = list(self.members) if configmaps is None else configmaps
        return sum(1 for n in names if self.status.get(n) == STATUS_COMPLETED)

    async def wait(
        self,
        done: Callable[[], bool],
        *,
        timeout: float,
        what: str,
        progress: Callable[[], str],
        interval: float = 0.05,
    ) -> float:
        """Poll ``done`` until true; returns the seconds waited.

        Prints ``progress()`` to stderr every few seconds; raises
        TimeoutError after ``timeout`` seconds, and whatever stopped a watch.
        """
        started = last = time.monotonic()
        while not done():
            for task in self._tasks:
                if task.done():
                    task.result()
                    raise RuntimeError(f"{task.get_name()} ended")
            now = time.monotonic()
            if now - started > timeout:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}: {progress()}")
            if now - last >= 5:
                last = now
                print(f"bench: waiting for {what} ({now - started:.0f}s): {progress()}", file=sys.stderr, flush=True)
            await asyncio.sleep(interval)
        return time.monotonic() - started

    # -- the watches -------------------------------------------------------

    async def _watch(self, resource: kube.Resource, selector: str, handle: Callable[[str, Json, float], None]) -> None:
        path = resource.path(self.namespace)
        listed = await kube.get_json(self.api, path, verb="list", query=[("labelSelector", selector)])
        now = time.monotonic()
        for item in listed.get("items") or ():
            handle("ADDED", item, now)
        version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        self._synced += 1
        while True:
            query = [
                ("labelSelector", selector),
                ("watch", "true"),
                ("allowWatchBookmarks", "true"),
                ("resourceVersion", version),
                ("timeoutSeconds", "600"),
            ]
            async with kube.open_watch(self.api, path, query=query, idle_timeout=150.0) as events:
                async for event in events:
                    now = time.monotonic()
                    obj = event.get("object") or {}
                    kind = event.get("type")
                    if kind == "ERROR":
                        raise ApiError.from_status(obj)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        handle(kind, obj, now)
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)

    def _on_pod(self, kind: str, obj: Json, now: float) -> None:
        self.pod_events += 1
        meta = obj.get("metadata") or {}
        slot, uid = _slot(meta), str(meta.get("uid", ""))
        seen = self.pods.get(slot)
        if kind == "DELETED":
            if seen is not None and seen.uid == uid:
                del self.pods[slot]
            return
        if meta.get("deletionTimestamp") and (seen is None or seen.uid != uid):
            return  # a predecessor on its way out: never the slot's current pod
        if seen is None or seen.uid != uid:
            seen = self.pods[slot] = PodSeen(uid=uid)
        epoch = (meta.get("annotations") or {}).get(EPOCH_ANNOTATION)
        if epoch is not None:
            seen.touched_at.setdefault(str(epoch), now)
        status = obj.get("status") or {}
        if (
            seen.running_at is None
            and status.get("phase") == "Running"
            and status.get("podIP")
            and not meta.get("deletionTimestamp")
        ):
            seen.running_at = now

    def _on_configmap(self, kind: str, obj: Json, now: float) -> None:
        self.configmap_events += 1
        name = str((obj.get("metadata") or {}).get("name", ""))
        if kind == "DELETED":
            self.status.pop(name, None)
            return
        data = obj.get("data") or {}
        binary = obj.get("binaryData") or {}
        self.sizes[name] = sum(len(k) + len(str(v).encode()) for k, v in data.items()) + sum(
            len(k) + len(base64.b64decode(str(v))) for k, v in binary.items()
        )
        try:
            spec = json.loads(files_from_configmap(obj).get(CLUSTER_FILE) or "{}")  # either form
        except ValueError:  # also SpecError: a compressed key that does not decode
            return
        status, epoch = str(spec.get("status", "")), int(spec.get("epoch", 0))
        self.status[name] = status
        if status != STATUS_COMPLETED or self.completed_epoch.get(name) == epoch:
            return
        self.completed_epoch[name] = epoch
        latency: float | None = None
        members = self.members.get(name)
        if members:
            times = [p.running_at for n in members if (p := self.pods.get(n)) is not None]
            if len(times) == len(members) and all(t is not None for t in times):
                latency = now - max(t for t in times if t is not None)
        self.completions.append(
            Completion(configmap=name, epoch=epoch, at=now, latency_s=latency, phase=self.phase, size=self.sizes[name])
        )


# -- the observer in a process of its own -----------------------------------------


class ObserverProcess:
    """An :class:`Observer` in its own process (``python -m tests.bench.observer``); see the module doc.

    Protocol: :meth:`start` (returns once both watches listed; register the
    expectations before, in ``expect``), :meth:`set_phase` as the run moves
    on, :meth:`stop` for the result: each completion as a dict
    (:class:`Completion`'s fields, plus ``touches``: seconds from the
    completion to each member showing its epoch) and the event counts.
    """

    def __init__(
        self, *, kubeconfig: Path, namespace: str, label_selector: str, expect: dict[str, list[str]], work: Path
    ) -> None:
        self.work = work
        self.expect_path = work.with_suffix(".expect.json")
        self.out_path = work.with_suffix(".out.json")
        self.expect_path.write_text(json.dumps(expect))
        self.argv = [
            sys.executable,
            "-m",
            "tests.bench.observer",
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            namespace,
            "--selector",
            label_selector,
            "--expect",
            str(self.expect_path),
            "--out",
            str(self.out_path),
        ]
        self.proc: subprocess.Popen[str] | None = None

    async def start(self, *, timeout: float = 60.0) -> None:
        """Start the process; returns when it says its watches have listed."""
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), timeout)
        if line.strip() != "ready":
            raise RuntimeError(f"observer process did not start (exit {self.proc.poll()}): {line!r}")

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return self.proc.pid if self.proc is not None else None

    def set_phase(self, phase: str) -> None:
        """Label the completions recorded from now on."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"phase {phase}\n")
        self.proc.stdin.flush()

    async def stop(self, *, timeout: float = 60.0) -> Json:
        """Ask the process for its result and wait for it to exit; the result document."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        code = await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout)
        if code != 0:
            raise RuntimeError(f"observer process exited with {code}")
        return json.loads(self.out_path.read_text())  # type: ignore[no-any-return]

    def kill(self) -> None:
        """End the process if it still runs (a failed run's cleanup)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def result_document(observer: Observer) -> Json:
    """What :class:`ObserverProcess` hands back: the completions with their touches, and the event counts."""
    return {
        "completions": [{**asdict(c), "touches": observer.touches(c)} for c in observer.completions],
        "pod_events": observer.pod_events,
        "configmap_events": observer.configmap_events,
    }


async def _serve(args: argparse.Namespace) -> None:
    from kubernetes_asyncio import config as kube_config
    from kubernetes_asyncio.client import Configuration

    cfg = Configuration()
    await kube_config.load_kube_config(config_file=args.kubeconfig, client_configuration=cfg)
    async with ApiClient(configuration=cfg) as api:
        observer = Observer(api=api, namespace=args.namespace, label_selector=args.selector)
        for configmap, slots in json.loads(Path(args.expect).read_text()).items():
            observer.expect(configmap, slots)
        await observer.start()
        print("ready", flush=True)
        while True:  # commands from the bench, read on a thread: this loop only watches
            line = await asyncio.to_thread(sys.stdin.readline)
            command, _, value = line.strip().partition(" ")
            if command == "phase":
                observer.phase = value
            elif command in ("stop", ""):
                break
        await observer.stop()
        Path(args.out).write_text(json.dumps(result_document(observer)))


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.bench.observer``: one observer in this process, driven over stdin (see :class:`ObserverProcess`)."""
    p = argparse.ArgumentParser(prog="python -m tests.bench.observer", description=ObserverProcess.__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--selector", required=True)
    p.add_argument("--expect", required=True, help="JSON: ConfigMap name -> its member slots")
    p.add_argument("--out", required=True, help="where the result document goes at stop")
    asyncio.run(_serve(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
