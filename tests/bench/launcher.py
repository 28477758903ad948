"""Launcher start -> spec observed, and the cost of waiting: before and after the one-file launcher.

    build/bench.sh --launcher [--repeats 5] [--concurrency 1,8] [--wait 60] [--before REF] [--json OUT]
    build/bench.sh --launcher --parts register [--concurrency 1,8] [--repeats 5] [--python PY]
    build/bench.sh --launcher --parts standins [--repeats 200] [--realtime] [--python PY] [--json OUT]

Start: N launchers (``--concurrency``) start at once, each with
``--print json`` against a spec that is already completed, in file mode (a
kubelet-style directory) and API mode (a ConfigMap on the real API server,
the admin kubeconfig's client certificate, and ``api-token``: a bound token
of a ServiceAccount, as in a pod). Per launcher: wall seconds from
process start to exit (it exits right after it observed the spec and printed
the variables) and CPU seconds (user + system, from ``wait4``'s rusage).
"before" runs the one-file launcher built from ``git archive REF``
(default: where this branch left main), "after" the one built from the work
tree, both as ``python3 -I -S ring-launch.pyz`` with this virtualenv's
Python.

Wait: one file-mode launcher waits ``--wait`` seconds on an initializing spec;
then the completed spec is swapped in the kubelet's way. Reported: its CPU
seconds over the whole run, and over ``--swaps`` short waits (p50 and max)
the latency from the swap to the launcher's "spec completed" line (the
figure the 50 ms target is about) and to its exit.

Register (``--parts register``, issue 24): N launchers start at once in API
mode with ``--register``, each as the one-file launcher of its own pod (a real
pod object, unscheduled, of the ServiceAccount ``ring-launch`` that
``build/launcher-rbac.yaml`` grants; the launcher authenticates with a token
the TokenRequest API bound to that pod, as the kubelet mounts it; the
cluster-scoped admission policy is not installed). Per launcher: wall
seconds from process start to its ``registered on pod`` line (printed when
the PATCH's answer arrived, so the PATCH reached the API server before it),
the CPU seconds it had used by then (``/proc/PID/schedstat``, nanoseconds), and
wall and CPU seconds to its exit (spec observed through the same API
connection, ``--print json``). Variants: main's one-file launcher (built from
``--before``) and this tree's, each run as the documented container command
(``PY ring-launch.pyz``) and as ``PY -I -S ring-launch.pyz``; ``PY`` is
``--python`` (default: this interpreter).

Stand-ins (``--parts standins``, alone; no cluster): one file-mode launcher
started alone, built as it is and with each stand-in for a standard-library
module replaced by that module (:mod:`tests.bench.standins`): what each
stand-in saves, against the 10 ms rule of CONTRIBUTING.md.

Prints a table; ``--json`` writes the figures. The cluster is the tests'
(``$RING_DEVCLUSTER_STATE``), brought up or reused like the tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ranktable.clusterspec import REGISTERED_ANNOTATION, STATUS_INITIALIZING
from ranktable.launch.kubeapi import KubeClient
from ranktable.launch.kubeconfig import load_client_config
from tests.support import launcherpyz
from tests.support.clients import REPO, K8s, devcluster_state_dir
from tests.support.kubectlring import token_kubeconfig
from tests.support.kubehelp import create_namespace, delete_namespace
from tests.support.kubeletdir import KubeletDir
from tests.support.launcherapi import put_spec, service_account
from tests.support.specs import make_spec

POD = "job-worker-3"
CM = "rings-config-bench"


def _say(message: str) -> None:
    print(f"bench-launcher: {message}", file=sys.stderr, flush=True)


def before_tree(ref: str, into: Path) -> Path:
    """``ranktable`` as it was at ``ref`` (git archive), unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "ranktable"], check=True, capture_output=True
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_at_once(argvs: Sequence[Sequence[str]], env: dict[str, str], cwd: Path) -> list[tuple[float, float, int]]:
    """Start every argv at once in ``cwd``; per process (wall s, CPU s, exit code).

    ``cwd`` must not hold a ``ranktable``: ``python -m`` puts it first on the path.
    """
    started: dict[int, float] = {}
    for argv in argvs:
        t0 = time.monotonic()
        proc = subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started[proc.pid] = t0
    results = []
    while started:
        pid, status, usage = os.wait4(-1, 0)
        if pid in started:
            results.append(
                (
                    time.monotonic() - started.pop(pid),
                    usage.ru_utime + usage.ru_stime,
                    os.waitstatus_to_exitcode(status),
                )
            )
    return results


def summary(rows: list[tuple[float, float, int]]) -> dict[str, float]:
    walls = [r[0] for r in rows]
    cpus = [r[1] for r in rows]
    failed = [r[2] for r in rows if r[2] != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} launchers failed (exit {failed[0]})")
    return {
        "wall_p50": statistics.median(walls),
        "wall_max": max(walls),
        "cpu_mean": statistics.mean(cpus),
        "cpu_p50": statistics.median(cpus),
        "cpu_max": max(cpus),
        "n": len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launcher", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--concurrency", default="1,8")
    p.add_argument("--wait", type=float, default=60.0, help="seconds of the file-mode wait (default 60)")
    p.add_argument("--swaps", type=int, default=10, help="swap -> exit samples (default 10)")
    p.add_argument("--parts", default="start,wait", help="which measurements (default start,wait)")
    p.add_argument("--before", default=None, help="git ref of the old launcher (default: merge-base with main)")
    p.add_argument("--python", default=sys.executable, help="interpreter of the register part (default: this one)")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="a launcher alone runs under `chrt -f 10`, a core of its own on a shared machine (root): "
        "start, N=1; standins, every start",
    )
    p.add_argument("--json", type=Path, metavar="OUT")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    if "standins" in parts:  # no cluster: file mode only
        if parts != ["standins"]:
            p.error("--parts standins runs alone")
        from tests.bench.standins import standin_figures, standin_lines

        work = Path(tempfile.mkdtemp(prefix="bench-standins-"))
        figures = standin_figures(work=work, python=args.python, repeats=args.repeats, realtime=args.realtime, say=_say)
        print("\n".join(standin_lines(figures)))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        return 0

    from ringdevcluster import ensure_up

    cluster = ensure_up(state_dir=devcluster_state_dir(), say=_say)
    k8s = K8s.from_kubeconfig(cluster.kubeconfig)
    ref = (
        args.before
        or subprocess.run(
            ["git", "-C", str(REPO), "merge-base", "HEAD", "main"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    work = Path(tempfile.mkdtemp(prefix="bench-launcher-"))
    old = before_tree(ref, work / "before")
    pyz = launcherpyz.build(work / "ring-launch.pyz")
    launcherpyz.builder().build(work / "before.pyz", repo=old)
    namespace = create_namespace(k8s, f"bench-launcher-{os.getpid()}")
    figures: dict[str, Any] = {"before_ref": ref, "start": {}, "wait": {}}
    try:
        volume = KubeletDir(work / "config")
        (work / "config").mkdir()
        spec = make_spec([("worker", 8)])
        volume.publish_spec(spec)
        put_spec(k8s, namespace, CM, spec)
        variants = {
            "before": [sys.executable, "-I", "-S", str(work / "before.pyz")],
            "after": [sys.executable, "-I", "-S", str(pyz)],
        }
        env_of = {
            "before": {"PATH": os.environ["PATH"], "POD_NAME": POD},
            "after": {"PATH": os.environ["PATH"], "POD_NAME": POD},
        }
        modes = {
            "file": ["--config-dir", str(volume.root)],
            "api": ["--from-api", "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace, "--configmap", CM],
        }
        if "start" in args.parts.split(","):  # a bound token, as in a pod (no client certificate to load)
            token = service_account(k8s, namespace, "trainer", configmap=CM, verbs=["get", "list", "watch"])
            config = token_kubeconfig(cluster.kubeconfig, token, work / "token.kubeconfig")
            modes["api-token"] = [
                "--from-api",
                "--kubeconfig",
                str(config),
                "--namespace",
                namespace,
                "--configmap",
                CM,
            ]
        lines = []
        figures["realtime"] = args.realtime
        if "start" in args.parts.split(","):
            lines.append(
                f"{'variant':8} {'mode':5} {'N':>3} {'wall p50':>9} {'wall max':>9} {'CPU-s/launcher':>15} {'CPU p50':>8}"
            )
        for mode, mode_args in modes.items() if "start" in args.parts.split(",") else ():
            for n in [int(x) for x in args.concurrency.split(",")]:
                rows_of: dict[str, list[tuple[float, float, int]]] = {variant: [] for variant in variants}
                alone = ["chrt", "-f", "10"] if args.realtime and n == 1 else []
                for _ in range(args.repeats):  # the variants take turns, so a change in the machine's load hits both
                    for variant, base in variants.items():
                        argv1 = [*alone, *base, *mode_args, "--timeout", "60", "--print", "json"]
                        rows_of[variant] += run_at_once([argv1] * n, env_of[variant], work)
                for variant, rows in rows_of.items():
                    s = summary(rows)
                    figures["start"][f"{variant}/{mode}/{n}"] = s
                    lines.append(
                        f"{variant:8} {mode:5} {n:>3} {s['wall_p50']:>8.3f}s {s['wall_max']:>8.3f}s {s['cpu_mean']:>14.3f}"
                        f" {s['cpu_p50']:>8.3f}"
                    )
                    _say(lines[-1])
        if "register" in args.parts.split(","):
            figures["register"] = register_figures(
                k8s,
                kubeconfig=cluster.kubeconfig,
                namespace=namespace,
                pyz={"before": work / "before.pyz", "after": pyz},
                python=args.python,
                concurrency=[int(x) for x in args.concurrency.split(",")],
                repeats=args.repeats,
                work=work,
                lines=lines,
            )
        for variant, base in variants.items() if "wait" in args.parts.split(",") else ():
            figures["wait"][variant] = wait_figures(base, env_of[variant], work / f"wait-{variant}", args)
            w = figures["wait"][variant]
            lines.append(
                f"{variant:8} file wait {args.wait:g}s: CPU {w['cpu_wait']:.3f}s; swap -> spec observed p50 "
                f"{w['observed_p50'] * 1000:.0f} ms, max {w['observed_max'] * 1000:.0f} ms; -> exit p50 "
                f"{w['swap_p50'] * 1000:.0f} ms, max {w['swap_max'] * 1000:.0f} ms ({w['swaps']:.0f} swaps)"
            )
            _say(lines[-1])
        print("\n".join(lines))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    finally:
        delete_namespace(k8s, namespace)
    return 0


def _launcher_grant(k8s: Any, namespace: str) -> str:
    """The namespaced part of build/launcher-rbac.yaml (account, Role, binding) in ``namespace``; the account."""
    with (REPO / "build" / "launcher-rbac.yaml").open(encoding="utf-8") as handle:
        for doc in yaml.safe_load_all(handle):
            kind = (doc or {}).get("kind")
            if kind == "ServiceAccount":
                k8s.core.create_namespaced_service_account(namespace, doc)
                account = str(doc["metadata"]["name"])
            elif kind == "Role":
                k8s.rbac.create_namespaced_role(namespace, doc)
            elif kind == "RoleBinding":
                k8s.rbac.create_namespaced_role_binding(namespace, doc)
    return account


def _member_pods(k8s: Any, namespace: str, spec: Any, account: str, kubeconfig: Path, work: Path) -> list[Any]:
    """One unscheduled pod per member of ``spec``; per pod (name, ip, kubeconfig with a token bound to it)."""
    members = []
    for member in spec.members:
        pod = k8s.core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": member.pod},
                "spec": {
                    "serviceAccountName": account,
                    "automountServiceAccountToken": False,
                    "nodeSelector": {"ring-controller.test/none": "x"},
                    "containers": [{"name": "c", "image": "x"}],
                },
            },
        )
        request = {
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": member.pod, "uid": pod.metadata.uid},
            }
        }
        token = k8s.core.create_namespaced_service_account_token(account, namespace, request).status.token
        config = token_kubeconfig(kubeconfig, token, work / f"{member.pod}.kubeconfig")
        members.append((member.pod, member.ip, config))
    return members


def _proc_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used so far: the scheduler's nanoseconds (``/proc/PID/schedstat``),
    else user + system clock ticks from ``/proc/PID/stat`` (10 ms steps)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as handle:
            return int(handle.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RegistrationWatch(threading.Thread):
    """Watches the namespace's pods; records when each pod's registration annotation takes a new value.

    The moment the watch event arrives is when a controller's watch would
    see the registration (the API server has stored the PATCH). ``pids``
    maps a pod to its launcher's process, whose CPU seconds so far are
    read at that moment.
    """

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        super().__init__(daemon=True)
        self.client = KubeClient(load_client_config(str(kubeconfig)), connect_timeout=10.0)
        self.namespace = namespace
        self.pids: dict[str, int] = {}
        self.seen: dict[str, list[tuple[float, float, str]]] = {}  # pod -> [(monotonic, launcher CPU-s, value)]
        self._last: dict[str, str] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stopped = False

    def run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        listed = self.client.get_json(path, {}, timeout=30)
        for pod in listed.get("items") or []:
            self._last[pod["metadata"]["name"]] = (pod["metadata"].get("annotations") or {}).get(
                REGISTERED_ANNOTATION, ""
            )
        query = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"], "timeoutSeconds": "3600"}
        self._ready.set()
        try:
            for event in self.client.stream(path, query, timeout=3600):
                now = time.monotonic()
                metadata = (event.get("object") or {}).get("metadata") or {}
                name = metadata.get("name", "")
                value = (metadata.get("annotations") or {}).get(REGISTERED_ANNOTATION, "")
                if value and value != self._last.get(name):
                    self._last[name] = value
                    with self._lock:
                        pid = self.pids.get(name)
                    try:
                        cpu = _proc_cpu(pid) if pid else float("nan")
                    except OSError:
                        cpu = float("nan")
                    with self._lock:
                        if not self._stopped:
                            self.seen.setdefault(name, []).append((now, cpu, value))
        except (OSError, ValueError):
            if not self._stopped:
                raise

    def start_watching(self) -> None:
        self.start()
        if not self._ready.wait(30):
            raise RuntimeError("the pod watch did not start")

    def launched(self, pod: str, pid: int) -> None:
        with self._lock:
            self.pids[pod] = pid

    def first_after(self, pod: str, since: float, *, within: float = 10.0) -> tuple[float, float]:
        """(monotonic time, CPU-s) of the first new registration of ``pod`` after ``since``; waits up to ``within``."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self._lock:
                for seen_at, cpu, _ in self.seen.get(pod, []):
                    if seen_at > since:
                        return seen_at, cpu
            time.sleep(0.01)
        raise RuntimeError(f"no registration of {pod} seen")

    def stop(self) -> None:
        """Stop recording. The stream is left to end with the process (a daemon thread): closing a TLS socket
        another thread reads from can block."""
        self._stopped = True


def run_registering(
    launches: Sequence[tuple[str, Sequence[str], dict[str, str]]], cwd: Path, watch: RegistrationWatch
) -> list[dict[str, float]]:
    """Start every (pod, argv, env) at once; per launcher: wall and CPU s to its registration seen, and to its exit."""
    sel = selectors.DefaultSelector()
    procs: dict[int, dict[str, Any]] = {}
    for pod, argv, env in launches:
        t0 = time.monotonic()
        proc = subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        watch.launched(pod, proc.pid)
        assert proc.stderr is not None
        procs[proc.pid] = {"t0": t0, "pod": pod, "err": b""}
        sel.register(proc.stderr, selectors.EVENT_READ, proc.pid)
    open_pipes = len(procs)
    while open_pipes:
        for key, _ in sel.select():
            row = procs[key.data]
            chunk = os.read(key.fd, 65536)
            if chunk:
                row["err"] += chunk
                continue
            row["exit"] = time.monotonic() - row["t0"]  # stderr closes when the launcher exits
            sel.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
            open_pipes -= 1
    results = []
    for pid, row in procs.items():
        _, status, usage = os.wait4(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 or b"ring-launch: registered on pod" not in row["err"]:
            raise RuntimeError(f"launcher failed (exit {code}) or did not register: {row['err'].decode()[-600:]}")
        seen_at, cpu = watch.first_after(row["pod"], row["t0"])
        results.append(
            {"seen": seen_at - row["t0"], "seen_cpu": cpu, "exit": row["exit"], "cpu": usage.ru_utime + usage.ru_stime}
        )
    return results


def register_figures(
    k8s: Any,
    *,
    kubeconfig: Path,
    namespace: str,
    pyz: dict[str, Path],
    python: str,
    concurrency: list[int],
    repeats: int,
    work: Path,
    lines: list[str],
) -> dict[str, Any]:
    """Launcher start -> its registration PATCH answered, and -> spec observed (exit), per variant and N."""
    spec = make_spec([("worker", max(concurrency))])
    put_spec(k8s, namespace, "rings-config-register", spec)
    account = _launcher_grant(k8s, namespace)
    members = _member_pods(k8s, namespace, spec, account, kubeconfig, work)
    flags = {"": [], "-I -S": ["-I", "-S"]}

    def launch(variant: str, flag: str, member: tuple[str, str, Path]) -> tuple[str, list[str], dict[str, str]]:
        pod, ip, config = member
        command = [python, *flags[flag], str(pyz[variant]), "--from-api", "--register", "--kubeconfig", str(config)]
        command += ["--namespace", namespace, "--configmap", "rings-config-register", "--timeout", "60"]
        return pod, [*command, "--print", "json"], {"PATH": os.environ["PATH"], "POD_NAME": pod, "POD_IP": ip}

    watch = RegistrationWatch(kubeconfig, namespace)
    watch.start_watching()
    try:
        # The Role binding takes effect within moments: one launcher must register before the clock runs.
        deadline = time.monotonic() + 30
        while True:
            try:
                run_registering([launch("after", "-I -S", members[0])], work, watch)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        figures: dict[str, Any] = {}
        lines.append(
            f"{'variant':8} {'python':7} {'N':>3} {'-> registration seen p50/max':>29} {'CPU-s p50':>9} "
            f"{'-> exit p50/max':>16} {'CPU-s p50':>9}"
        )
        for n in concurrency:
            for flag in flags:
                for variant in pyz:
                    rows: list[dict[str, float]] = []
                    for _ in range(repeats):
                        rows += run_registering([launch(variant, flag, m) for m in members[:n]], work, watch)
                    s = {
                        "seen_p50": statistics.median(r["seen"] for r in rows),
                        "seen_max": max(r["seen"] for r in rows),
                        "seen_cpu_p50": statistics.median(r["seen_cpu"] for r in rows),
                        "exit_p50": statistics.median(r["exit"] for r in rows),
                        "exit_max": max(r["exit"] for r in rows),
                        "cpu_p50": statistics.median(r["cpu"] for r in rows),
                        "n": float(len(rows)),
                    }
                    figures[f"{variant}/{flag or 'plain'}/{n}"] = s
                    lines.append(
                        f"{variant:8} {flag or 'plain':7} {n:>3} {s['seen_p50']:>17.3f}s/{s['seen_max']:.3f}s "
                        f"{s['seen_cpu_p50']:>9.3f} {s['exit_p50']:>8.3f}s/{s['exit_max']:.3f}s {s['cpu_p50']:>9.3f}"
                    )
                    _say(lines[-1])
    finally:
        watch.stop()
    return figures


def wait_figures(base: list[str], env: dict[str, str], directory: Path, args: argparse.Namespace) -> dict[str, float]:
    """CPU over one long wait, and swap -> exit latencies over short ones (file mode)."""
    directory.mkdir()
    volume = KubeletDir(directory)
    waiting = make_spec([("worker", 8)], status=STATUS_INITIALIZING, present={0, 1})
    argv = [*base, "--config-dir", str(directory), "--timeout", str(args.wait + 60), "--print", "json"]

    def one(wait: float) -> tuple[float, float, float]:
        """(swap -> "spec completed" line on stderr, swap -> exit, CPU-s of the whole run)."""
        volume.publish_spec(waiting)
        proc = subprocess.Popen(
            argv, env=env, cwd=directory.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert proc.stderr is not None
        time.sleep(wait)
        swapped = time.monotonic()
        volume.publish_spec(make_spec([("worker", 8)]))
        observed = float("nan")
        for line in proc.stderr:
            if "spec completed" in line:
                observed = time.monotonic() - swapped
                break
        proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        exited = time.monotonic() - swapped
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"the waiting launcher failed (exit {os.waitstatus_to_exitcode(status)})")
        return observed, exited, usage.ru_utime + usage.ru_stime

    _, _, cpu = one(args.wait)
    samples = [one(1.0 + 0.137 * i) for i in range(args.swaps)]
    return {
        "cpu_wait": cpu,
        "observed_p50": statistics.median(s[0] for s in samples),
        "observed_max": max(s[0] for s in samples),
        "swap_p50": statistics.median(s[1] for s in samples),
        "swap_max": max(s[1] for s in samples),
        "swaps": float(len(samples)),
    }


if __name__ == "__main__":
    sys.exit(main())
