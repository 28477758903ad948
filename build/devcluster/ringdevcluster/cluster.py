"""Run a real Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, owned by one state directory,
plus optional workload controllers (JobSet, Volcano, Kubeflow Trainer: see
:mod:`addons`) and a real node (:mod:`node`, started by
:meth:`Cluster.start_node`, torn down first by ``down``).

Design:

* **One state directory owns one cluster.** It holds ``state.json`` (ports,
  binaries, each component's argv), ``pki/``, ``etcd/`` (data), ``logs/``,
  ``run/<component>.pid`` and, once the cluster is ready, ``kubeconfig``
  (admin). Every command takes the directory's ``lock`` file first, so two
  ``up`` calls cannot race.
* **Processes are identified, not guessed.** A pid file records the pid, the
  kernel's start time of that pid (``/proc/PID/stat`` field 22) and the binary;
  a process is ours only if all three still match. ``down`` therefore never
  signals a process that merely inherited a recycled pid, and never anything
  it did not start.
* **Optional components are additive.** ``up`` with ``addons`` runs those
  workload controllers too; a cluster keeps the ones it has (``state.json``
  records them), so a later plain ``up`` reuses them and ``up --with X`` on a
  running cluster only adds X (build, configure, start), touching nothing
  else. Their processes start after the CRDs (theirs replace the harness's
  schemas of the same name) and their API objects (webhook registrations, the
  Volcano queue) are in place.
* **up = reuse, repair, or reset.** A healthy cluster is reused as is (CRDs and
  nodes are re-applied: idempotent, and it rolls schema changes forward). If
  etcd and the API server are alive but another component died, only the dead
  ones are restarted. Anything else (a run killed half-way, dead pids, stale
  files, ports now taken) is stopped and wiped, and a fresh cluster is started
  on newly chosen free ports with a fresh CA.
* **Readiness is checked the way a user would feel it:** etcd ``/health``,
  apiserver ``/readyz``, the controller-manager's and scheduler's
  ``/healthz``, kwok's ``/healthz``, the CRDs ``Established``, and every fake
  node ``Ready`` without the ``not-ready`` taint (so pods can be scheduled the
  moment ``up`` returns).
* The API is spoken with the standard library (``urllib`` + ``ssl``, the admin
  client certificate): the tool starts fast and needs no client package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import functools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ringdevcluster import addons as addon_specs
from ringdevcluster import build, images, kwok, node
from ringdevcluster.pki import Pki, write_kubeconfig

__all__ = [
    "COMPONENTS",
    "Cluster",
    "ClusterError",
    "ComponentStatus",
    "DEFAULT_NODES",
    "default_state_dir",
    "down",
    "ensure_up",
    "load",
]

#: The control plane's components in start order; stopped in reverse (after
#: the optional ones, ``Cluster.components``).
COMPONENTS: tuple[str, ...] = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
DEFAULT_NODES = 4
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
_ADMIN_USER = "ring-devcluster-admin"
_STATE_VERSION = 1
# SIGTERM grace before SIGKILL. The API server holds watch connections open for
# up to a minute on SIGTERM; all state is in etcd, so a short grace is safe.
_GRACE_SECONDS = 3.0
_READY_TIMEOUT = 120.0
_FIELD_MANAGER = "ring-devcluster"

Say = Callable[[str], None]


class ClusterError(RuntimeError):
    """The control plane could not be brought to the requested state.

    The message names the component and its log file.
    """


def default_state_dir() -> Path:
    """``$RING_DEVCLUSTER_STATE``, else ``$XDG_STATE_HOME/ring-devcluster``
    (default ``~/.local/state/ring-devcluster``)."""
    env = os.environ.get("RING_DEVCLUSTER_STATE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "ring-devcluster"


# --------------------------------------------------------------------------
# processes


def _proc_start_time(pid: int) -> int | None:
    """The kernel start time of ``pid``, or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) is parenthesised and may contain spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _proc_argv0(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.split(b"\0", 1)[0].decode(errors="replace") if raw else None


@dataclasses.dataclass(frozen=True)
class _PidRecord:
    pid: int
    start_time: int
    binary: str

    def alive(self) -> bool:
        return self.start_time == _proc_start_time(self.pid) and _proc_argv0(self.pid) == self.binary


# Children started by this Python process, so stopping them also reaps them
# (a zombie would otherwise linger until this process exits).
_children: dict[int, subprocess.Popen[bytes]] = {}


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def _read_record(path: Path) -> _PidRecord | None:
    try:
        raw = json.loads(path.read_text())
        return _PidRecord(pid=int(raw["pid"]), start_time=int(raw["start_time"]), binary=str(raw["binary"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _stop_pid_file(path: Path, *, grace: float) -> bool:
    """Stop the process ``path`` records if it is still that process; remove ``path``.

    SIGTERM, then SIGKILL after ``grace`` seconds. Returns True if it ran.
    """
    record = _read_record(path)
    stopped = False
    if record is not None and record.alive():
        stopped = True
        _signal(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while record.alive() and time.monotonic() < deadline:
            _reap(record.pid)
            time.sleep(0.05)
        if record.alive():
            _signal(record.pid, signal.SIGKILL)
            while record.alive():
                _reap(record.pid)
                time.sleep(0.02)
        _reap(record.pid)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return stopped


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------
# HTTP


def _no_proxy_opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    # Never route loopback traffic through an HTTP(S)_PROXY from the environment.
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def _probe(opener: urllib.request.OpenerDirector, url: str, *, timeout: float = 2.0) -> tuple[bool, str]:
    """GET ``url``: (True, body) on 200, (False, reason) otherwise."""
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status == 200, resp.read(400).decode(errors="replace").strip()
    except urllib.error.HTTPError as err:
        return False, f"HTTP {err.code}: {err.read(400).decode(errors='replace').strip()}"
    except (OSError, urllib.error.URLError) as err:
        return False, str(getattr(err, "reason", err))


class ApiError(ClusterError):
    """A Kubernetes API request failed with an HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class _Api:
    """A minimal JSON client for the admin user (certificate auth)."""

    def __init__(self, *, server: str, ca: Path, cert: Path, key: Path) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self.server = server
        self.opener = _no_proxy_opener(context)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as err:
            raise ApiError(err.code, err.read(2000).decode(errors="replace")) from None
        return json.loads(payload) if payload else None

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        """Server-side apply ``obj`` at ``path`` (the object's own URL)."""
        query = urllib.parse.urlencode({"fieldManager": _FIELD_MANAGER, "force": "true"})
        return self.request("PATCH", f"{path}?{query}", obj, content_type="application/apply-patch+yaml")


# --------------------------------------------------------------------------
# status


@dataclasses.dataclass(frozen=True)
class ComponentStatus:
    """One component as ``status`` reports it."""

    name: str
    pid: int | None
    running: bool
    healthy: bool
    detail: str
    log: Path


def _crd_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    crd_dir = resources.files("ringdevcluster").joinpath("crds")
    for entry in sorted(crd_dir.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(entry.read_text()) if d)
    return docs


class Cluster:
    """A control plane described by a state directory.

    Obtain one from :func:`ensure_up` (or :func:`load` for one already up).
    ``kubeconfig`` is the admin kubeconfig (``system:masters``); ``server`` the
    API server URL. :meth:`stop_component` / :meth:`start_component` let a test
    take one component away and bring it back (same argv, same port); call
    :meth:`start_component` before the test ends, or the next ``up`` repairs it.
    ``addons`` names the optional workload controllers this cluster runs and
    ``components`` every process, control plane first.
    Methods are not safe to call concurrently with ``up``/``down`` on the same
    state directory from another process.
    """

    def __init__(self, state_dir: Path, state: dict[str, Any]) -> None:
        self.state_dir = state_dir
        self.pki = Pki(state_dir / "pki")
        self.kubeconfig: Path = state_dir / "kubeconfig"
        self.ca_cert: Path = self.pki.ca_cert
        self._load_state(state)

    def _load_state(self, state: dict[str, Any]) -> None:
        self._state = state
        self.server: str = state["server"]
        self.versions: dict[str, str] = dict(state["versions"])
        self.ports: dict[str, int] = dict(state["ports"])
        self.addons: tuple[str, ...] = tuple(state.get("addons", ()))
        self.components: tuple[str, ...] = COMPONENTS + tuple(addon_specs.process_names(self.addons))

    def _addon_binaries(self) -> dict[str, Path]:
        """Binary name -> path of every addon process (their directories hold the assets)."""
        return {
            p.binary: Path(self._state["argv"][p.name][0])
            for name in self.addons
            for p in addon_specs.ADDONS[name].processes
        }

    def add_addons(
        self, names: Sequence[str], *, binaries: dict[str, Path], versions: dict[str, str], say: Say
    ) -> None:
        """Record and configure addons ``names`` (not yet in ``addons``) without starting them.

        Allocates their ports, writes their files and rewrites ``state.json``;
        ``ensure_up`` then applies their objects and starts them.
        """
        state = json.loads(json.dumps(self._state))
        restart = False
        for name in names:
            if name in state.get("addons", []):
                continue
            addon = addon_specs.ADDONS[name]
            ports = {key: _free_port() for key in addon.ports}
            state["ports"].update(ports)
            setup = addon_specs.configure(
                name,
                state_dir=self.state_dir,
                server=self.server,
                pki=self.pki,
                ports=state["ports"],
                binaries=binaries,
            )
            state["argv"].update(setup.argv)
            state.setdefault("env", {}).update(setup.env)
            state.setdefault("addons", []).append(name)
            state["versions"].update({m: versions[m] for m in addon_specs.modules([name])})
            say(f"configured {name}: {', '.join(p.name for p in addon.processes)}")
            restart = _add_flags(state["argv"]["kube-apiserver"], setup.apiserver_args) or restart
        _write_state(self.state_dir, state)
        self._load_state(state)
        if restart:
            say("restarting kube-apiserver with the flags the new components need")
            self.stop_component("kube-apiserver")
            self.start_component("kube-apiserver")

    @functools.cached_property
    def api(self) -> _Api:
        """Admin JSON client (created on first use: ``status`` of a half-wiped
        state directory must not fail on missing certificates)."""
        return _Api(server=self.server, ca=self.pki.ca_cert, cert=self.pki.cert("admin"), key=self.pki.key("admin"))

    # -- process records ---------------------------------------------------

    def _pid_path(self, name: str) -> Path:
        return self.state_dir / "run" / f"{name}.pid"

    def log_path(self, name: str) -> Path:
        """Where component ``name`` writes its stdout and stderr."""
        return self.state_dir / "logs" / f"{name}.log"

    def _record(self, name: str) -> _PidRecord | None:
        return _read_record(self._pid_path(name))

    def pid(self, name: str) -> int | None:
        """The pid of component ``name`` if it is running (and ours), else None."""
        record = self._record(name)
        if record is None:
            return None
        if record.alive():
            return record.pid
        _reap(record.pid)  # collect the exit status of a child of ours that died
        return None

    # -- lifecycle ---------------------------------------------------------

    def start_component(self, name: str, *, wait: bool = True) -> int:
        """Start component ``name`` with its recorded argv; return its pid.

        A no-op if it is already running. With ``wait`` (the default) returns
        only once it is healthy; raises :class:`ClusterError` otherwise.
        """
        running = self.pid(name)
        if running is not None:
            return running
        argv: list[str] = self._state["argv"][name]
        log_path = self.log_path(name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._pid_path(name).parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "ETCDCTL_ENDPOINTS")}
        env.update(self._state.get("env", {}).get(name, {}))
        with open(log_path, "ab") as log:
            log.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
            log.flush()
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                env=env,
                start_new_session=True,  # survives Ctrl-C of the caller and its exit
            )
        _children[child.pid] = child
        # Until the child has exec'd, /proc shows the Python interpreter: wait
        # for the binary, so the pid record written below identifies it.
        start_time = None
        deadline = time.monotonic() + 10
        while child.poll() is None and time.monotonic() < deadline:
            start_time = _proc_start_time(child.pid)
            if start_time is not None and _proc_argv0(child.pid) == argv[0]:
                break
            time.sleep(0.005)
        if child.poll() is not None or start_time is None:
            raise ClusterError(f"{name} exited at once (code {child.poll()}); see {log_path}\n{self._tail(name)}")
        record = {"pid": child.pid, "start_time": start_time, "binary": argv[0]}
        tmp = self._pid_path(name).with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self._pid_path(name))
        if wait:
            self.wait_healthy([name])
        return child.pid

    def stop_component(self, name: str, *, grace: float = _GRACE_SECONDS) -> bool:
        """Stop component ``name`` (SIGTERM, then SIGKILL after ``grace`` s).

        Returns True if a process of ours was running. Only the process whose
        pid, start time and binary match the pid file is ever signalled.
        """
        return _stop_pid_file(self._pid_path(name), grace=grace)

    def reload(self, name: str) -> None:
        """Make running component ``name`` re-read its configuration files (Prometheus: ``POST /-/reload``)."""
        if name != "prometheus":
            raise ClusterError(f"{name} has no configuration reload")
        url = f"http://127.0.0.1:{self.ports['prometheus-web']}/-/reload"
        try:
            with _no_proxy_opener(None).open(urllib.request.Request(url, method="POST"), timeout=30) as resp:
                resp.read()
        except (urllib.error.URLError, OSError) as err:
            raise ClusterError(
                f"prometheus did not reload its configuration ({err}); see {self.log_path(name)}"
            ) from None

    def start_node(self, *, say: Say) -> None:
        """Start (or repair) the real node: host set-up, containerd, the sandbox image, then the rest.

        Order matters: the bridge before anything binds its address,
        containerd before the kubelet (which exits if the runtime is absent)
        and before the image import. :meth:`wait_addons_ready` then waits for
        the Node to be Ready.
        """
        started = time.monotonic()
        node.check_host()
        node.claim(
            self.state_dir,
            alive=_node_alive,
            release=lambda other: _release_node(other, say=say),
            say=say,
        )
        node.prepare_host(self.state_dir, say=say)
        self.start_component("containerd")
        if node.import_pause(self.state_dir):
            say(f"imported the sandbox image {images.PAUSE_IMAGE}")
        for name in node.PROCESSES[1:]:
            self.start_component(name, wait=False)
        self.wait_healthy(node.PROCESSES)
        healthy = time.monotonic() - started
        self.wait_addons_ready(only=("node",))
        say(
            f"real node {node.NODE_NAME} Ready after {time.monotonic() - started:.1f}s (processes healthy: {healthy:.1f}s)"
        )

    def stop_all(self) -> list[str]:
        """Stop every component (reverse start order); return the names stopped."""
        return [name for name in reversed(self.components) if self.stop_component(name)]

    # -- health ------------------------------------------------------------

    def _health(self, name: str) -> tuple[bool, str]:
        port = self.ports.get(name, 0)
        if name == "etcd":
            ok, body = _probe(_no_proxy_opener(None), f"http://127.0.0.1:{port}/health")
            return ok and '"health":"true"' in body.replace(" ", ""), body
        if name == "kube-apiserver":
            return _probe(self.api.opener, f"{self.server}/readyz")
        if name == "kwok":
            return _probe(_no_proxy_opener(None), f"http://127.0.0.1:{port}/healthz")
        if name not in COMPONENTS:
            health = next(p.health for a in self.addons for p in addon_specs.ADDONS[a].processes if p.name == name)
            return _probe(_no_proxy_opener(None), f"http://127.0.0.1:{self.ports[health.port]}{health.path}")
        # controller-manager and scheduler serve /healthz with a self-signed cert.
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        return _probe(_no_proxy_opener(insecure), f"https://127.0.0.1:{port}/healthz")

    def status(self) -> list[ComponentStatus]:
        """Every component's process and health, in start order."""
        out = []
        for name in self.components:
            pid = self.pid(name)
            healthy, detail = self._health(name) if pid is not None else (False, "not running")
            out.append(
                ComponentStatus(
                    name=name,
                    pid=pid,
                    running=pid is not None,
                    healthy=healthy,
                    detail=detail,
                    log=self.log_path(name),
                )  # fmt: skip
            )
        return out

    def healthy(self) -> bool:
        """True when every component runs and answers its health check."""
        return all(s.healthy for s in self.status())

    def wait_healthy(self, names: Sequence[str], *, timeout: float = _READY_TIMEOUT) -> None:
        """Wait until each of ``names`` is running and healthy, or raise."""
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                if self.pid(name) is None:
                    raise ClusterError(f"{name} exited during start-up; see {self.log_path(name)}\n{self._tail(name)}")
                ok, detail = self._health(name)
                if ok:
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"{name} not healthy after {timeout:.0f}s ({detail}); see {self.log_path(name)}\n"
                        + self._tail(name)
                    )
                time.sleep(0.1)

    def _tail(self, name: str, lines: int = 12) -> str:
        try:
            text = self.log_path(name).read_text(errors="replace")
        except OSError:
            return ""
        return "".join(text.splitlines(keepends=True)[-lines:])

    # -- objects -----------------------------------------------------------

    def apply_crds(self) -> list[str]:
        """Create or update the harness CRDs and those of the addons; return their names.

        An addon's CRD replaces the harness's schema of the same name.
        """
        docs = {d["metadata"]["name"]: d for d in _crd_documents()}
        docs.update(
            (d["metadata"]["name"], d) for d in addon_specs.crd_documents(self.addons, binaries=self._addon_binaries())
        )
        for name, doc in docs.items():
            self.api.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", doc)
        return list(docs)

    def apply_addon_objects(self) -> None:
        """Create or update the API objects the addons need (webhook registrations, queues)."""
        for name in self.addons:
            for path, obj in addon_specs.objects(
                name, ports=self.ports, binaries=self._addon_binaries(), ca_cert=self.ca_cert
            ):
                self.api.apply(path, obj)

    def wait_addons_ready(self, *, timeout: float = _READY_TIMEOUT, only: Sequence[str] | None = None) -> None:
        """Wait until every addon's (or those in ``only``) own readiness conditions hold (e.g. Volcano's queue is Open)."""

        def get(path: str) -> Any:
            try:
                return self.api.request("GET", path)
            except ApiError as err:
                if err.status == 404:
                    return None
                raise

        deadline = time.monotonic() + timeout
        while True:
            names = [n for n in self.addons if only is None or n in only]
            waiting = [item for name in names for item in addon_specs.pending(name, get)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"not ready after {timeout:.0f}s: {', '.join(waiting)}; see {self.state_dir / 'logs'}"
                )
            time.sleep(0.1)

    def register_nodes(self, count: int) -> list[str]:
        """Create or update fake nodes ``0..count-1``; return their names."""
        names = []
        for index in range(count):
            manifest = kwok.node_manifest(index)
            self.api.apply(f"/api/v1/nodes/{manifest['metadata']['name']}", manifest)
            names.append(manifest["metadata"]["name"])
        return names

    def wait_objects(self, *, crds: Sequence[str], nodes: Sequence[str], timeout: float = _READY_TIMEOUT) -> None:
        """Wait until ``crds`` are Established and ``nodes`` Ready and schedulable."""
        deadline = time.monotonic() + timeout
        pending: list[str] = ["?"]
        while pending:
            pending = []
            for name in crds:
                crd = self.api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                if not _condition_true(crd, "Established"):
                    pending.append(f"crd/{name}")
            listed = self.api.request("GET", "/api/v1/nodes?labelSelector=" + "%3D".join(kwok.NODE_LABEL))
            by_name = {n["metadata"]["name"]: n for n in listed.get("items", [])}
            for name in nodes:
                node = by_name.get(name)
                taints = (node or {}).get("spec", {}).get("taints") or []
                if node is None or not _condition_true(node, "Ready"):
                    pending.append(f"node/{name} (not Ready)")
                elif any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints):
                    pending.append(f"node/{name} (not-ready taint)")
            if pending and time.monotonic() > deadline:
                raise ClusterError(
                    f"not ready after {timeout:.0f}s: {', '.join(pending)}; see {self.log_path('kwok')} and "
                    f"{self.log_path('kube-controller-manager')}"
                )
            if pending:
                time.sleep(0.1)

    # -- users -------------------------------------------------------------

    def user_kubeconfig(self, *, user: str, groups: Sequence[str] = ()) -> Path:
        """Mint a client certificate for ``user`` in ``groups`` and return a kubeconfig for it.

        The user has exactly the rights RBAC grants that name and those groups
        (plus ``system:authenticated``). The file lives under the state dir
        (``users/``) and is overwritten by a later call for the same identity.
        """
        slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in "-".join([user, *groups]))
        name = f"user-{slug}"
        cert, key = self.pki.issue(name, cn=user, groups=groups)
        return write_kubeconfig(
            self.state_dir / "users" / f"{slug}.kubeconfig",
            server=self.server, ca_cert=self.ca_cert, client_cert=cert, client_key=key, user=user,
        )  # fmt: skip


def _condition_true(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in obj.get("status", {}).get("conditions") or []
    )


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError as err:
        if err.errno != errno.ESRCH:
            raise


# --------------------------------------------------------------------------
# state directory


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
        return None
    return state


def load(state_dir: Path | str | None = None) -> Cluster | None:
    """The cluster recorded in ``state_dir`` (running or not), or None if none is."""
    directory = (Path(state_dir) if state_dir is not None else default_state_dir()).resolve()
    state = _read_state(directory)
    return Cluster(directory, state) if state is not None else None


def _stop_recorded(state_dir: Path) -> list[str]:
    """Stop whatever the pid files of ``state_dir`` still point at.

    Optional components first (any pid file that is not the control plane's,
    so a half-written state cannot hide one), then the control plane in
    reverse start order.
    """
    run = state_dir / "run"
    # The real node first: its kubelet must not outlive the API server, and
    # its containers, mounts, bridge and sysctls are put back.
    stopped = node.teardown(state_dir, stop=_stopper(state_dir), say=_stderr_say)
    extra = sorted(p.stem for p in run.glob("*.pid") if p.stem not in COMPONENTS) if run.is_dir() else []
    return stopped + [
        name for name in [*extra, *reversed(COMPONENTS)] if _stop_pid_file(run / f"{name}.pid", grace=_GRACE_SECONDS)
    ]


def _stopper(state_dir: Path) -> Callable[[str], bool]:
    """``stop(name)`` for the components recorded in ``state_dir`` (see :func:`_stop_pid_file`)."""
    return lambda name: _stop_pid_file(state_dir / "run" / f"{name}.pid", grace=_GRACE_SECONDS)


def _node_alive(state_dir: Path) -> bool:
    """True if the cluster in ``state_dir`` still runs (its node or its control plane), so still owns its node."""
    records = (_read_record(state_dir / "run" / f"{name}.pid") for name in (*node.PROCESSES, *COMPONENTS))
    return any(r is not None and r.alive() for r in records)


def _release_node(state_dir: Path, *, say: Say) -> None:
    """Tear down the real node a dead cluster in ``state_dir`` left behind."""
    node.teardown(state_dir, stop=_stopper(state_dir), say=say)


def _stderr_say(message: str) -> None:
    print(f"ring-devcluster: {message}", file=sys.stderr, flush=True)


def _add_flags(argv: list[str], flags: Sequence[str]) -> bool:
    """Append to ``argv`` each ``--flag=value`` of ``flags`` it lacks (replacing another value); True if changed."""
    changed = False
    for flag in flags:
        key = flag.split("=", 1)[0] + "="
        current = [a for a in argv if a.startswith(key)]
        if current == [flag]:
            continue
        argv[:] = [a for a in argv if not a.startswith(key)] + [flag]
        changed = True
    return changed


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    tmp = state_dir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_dir / "state.json")


def _wipe(state_dir: Path) -> None:
    for entry in state_dir.iterdir():
        if entry.name == "lock":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


AUDIT_POLICY_FILE = "audit-policy.yaml"
#: The API server's audit policy: ConfigMap writes (who, when) and Lease
#: writes with their request body (the holder they set); nothing else, so the
#: log stays small. Read it from ``<state dir>/logs/audit.log``.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    namespaces: ["kube-node-lease"]
  - level: Request
    verbs: ["create", "update", "patch"]
    resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
  - level: Metadata
    verbs: ["create", "update", "patch", "delete"]
    resources: [{group: "", resources: ["configmaps"]}]
  - level: None
"""


def _argv(*, state_dir: Path, binaries: dict[str, Path], ports: dict[str, int], pki: Pki) -> dict[str, list[str]]:
    kc = state_dir / "kubeconfigs"
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    return {
        "etcd": [
            str(binaries["etcd"]),
            "--name=devcluster",
            f"--data-dir={state_dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=devcluster={peer_url}",
            "--initial-cluster-state=new",
            # A throw-away test cluster: durability is not worth the fsync latency.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        "kube-apiserver": [
            str(binaries["kube-apiserver"]),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['kube-apiserver']}",
            # The endpoint reconciler would publish the loopback advertise
            # address in Endpoints, which validation rejects; nothing here
            # reaches the API through the `kubernetes` Service anyway.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki.cert('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=Node,RBAC",
            # Beside the default plugins: namespaces can pin their pods to a node and
            # give them tolerations (annotations), as an admin places a system namespace;
            # the tests put the shipped controller on the real node that way.
            "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={state_dir / 'pki' / 'sa.pub'}",
            f"--service-account-signing-key-file={state_dir / 'pki' / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            # Who wrote which ConfigMap and Lease, when (the chaos runs check
            # every write against the Lease holder): see AUDIT_POLICY.
            f"--audit-policy-file={state_dir / AUDIT_POLICY_FILE}",
            f"--audit-log-path={state_dir / 'logs' / 'audit.log'}",
            "--audit-log-maxsize=200",
            "--audit-log-maxbackup=1",
            "--profiling=false",
            "--v=1",
        ],
        "kube-controller-manager": [
            str(binaries["kube-controller-manager"]),
            f"--kubeconfig={kc / 'kube-controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-controller-manager']}",
            "--leader-elect=false",
            # All default controllers: garbage collector, job, deployment,
            # replicaset, namespace, serviceaccount(-token), node lifecycle...
            # Pod CIDRs are set by the harness, so no --allocate-node-cidrs.
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={state_dir / 'pki' / 'sa.key'}",
            f"--root-ca-file={pki.ca_cert}",
            f"--cluster-signing-cert-file={pki.ca_cert}",
            f"--cluster-signing-key-file={pki.ca_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--profiling=false",
            "--v=1",
        ],
        "kube-scheduler": [
            str(binaries["kube-scheduler"]),
            f"--kubeconfig={kc / 'kube-scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-scheduler']}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ],
        "kwok": [
            str(binaries["kwok"]),
            f"--kubeconfig={kc / 'kwok.kubeconfig'}",
            f"--config={state_dir / 'kwok.yaml'}",
            "--manage-nodes-with-label-selector=" + "=".join(kwok.NODE_LABEL),
            "--node-lease-duration-seconds=40",
            # Fallback for a labelled node without a pod CIDR (ours all have one).
            "--cidr=127.1.255.0/24",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{ports['kwok']}",
        ],
    }


def _fresh(
    state_dir: Path, *, binaries: dict[str, Path], versions: dict[str, str], addons: Sequence[str], say: Say
) -> Cluster:
    """Create PKI, configs and state for a new cluster in an empty ``state_dir``."""
    ports = {
        name: _free_port()
        for name in ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
    }
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    pki = Pki(state_dir / "pki")
    pki.init_ca()
    pki.issue(
        "apiserver",
        cn="kube-apiserver",
        server_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                      "kubernetes.default.svc.cluster.local"],
        server_ips=["127.0.0.1", "10.96.0.1"],
    )  # fmt: skip
    pki.service_account_keys()
    identities = {
        "admin": (_ADMIN_USER, ["system:masters"]),
        "kube-controller-manager": ("system:kube-controller-manager", []),
        "kube-scheduler": ("system:kube-scheduler", []),
        # kwok updates node and pod status of every fake node: an admin.
        "kwok": ("ring-devcluster-kwok", ["system:masters"]),
    }
    for name, (cn, groups) in identities.items():
        cert, key = pki.issue(name, cn=cn, groups=groups)
        if name != "admin":
            write_kubeconfig(
                state_dir / "kubeconfigs" / f"{name}.kubeconfig",
                server=server, ca_cert=pki.ca_cert, client_cert=cert, client_key=key, user=cn,
            )  # fmt: skip
    (state_dir / "kwok.yaml").write_text(kwok.STAGES)
    (state_dir / AUDIT_POLICY_FILE).write_text(AUDIT_POLICY)
    argv = _argv(state_dir=state_dir, binaries=binaries, ports=ports, pki=pki)
    env: dict[str, dict[str, str]] = {}
    for name in addons:
        ports.update({key: _free_port() for key in addon_specs.ADDONS[name].ports})
        setup = addon_specs.configure(name, state_dir=state_dir, server=server, pki=pki, ports=ports, binaries=binaries)
        argv.update(setup.argv)
        env.update(setup.env)
        _add_flags(argv["kube-apiserver"], setup.apiserver_args)
    state = {
        "version": _STATE_VERSION,
        "server": server,
        "ports": ports,
        "versions": versions,
        "addons": list(addons),
        "argv": argv,
        "env": env,
        "created": time.time(),
    }
    _write_state(state_dir, state)
    say(f"new cluster in {state_dir}: apiserver {server}, etcd :{ports['etcd']}")
    return Cluster(state_dir, state)


def _finish(cluster: Cluster, *, nodes: int, say: Say) -> None:
    """CRDs, nodes, the addons' objects and processes; then the admin kubeconfig."""
    crds = cluster.apply_crds()
    names = cluster.register_nodes(nodes)
    cluster.wait_objects(crds=crds, nodes=names)
    if cluster.addons:
        cluster.apply_addon_objects()
        for name in cluster.addons:
            if addon_specs.refresh(name, state_dir=cluster.state_dir) and cluster.pid(name) is not None:
                cluster.reload(name)
                say(f"reloaded {name}: its configuration changed")
        extra = [n for n in cluster.components if n not in COMPONENTS]
        for name in extra:
            if name not in node.PROCESSES:
                cluster.start_component(name, wait=False)
        if "node" in cluster.addons:
            cluster.start_node(say=say)
        cluster.wait_healthy(extra)
        cluster.wait_addons_ready()
        say(f"running {', '.join(cluster.addons)}: {', '.join(extra)}")
    write_kubeconfig(
        cluster.kubeconfig,
        server=cluster.server, ca_cert=cluster.ca_cert, client_cert=cluster.pki.cert("admin"),
        client_key=cluster.pki.key("admin"), user=_ADMIN_USER,
    )  # fmt: skip


def ensure_up(
    *,
    state_dir: Path | str | None = None,
    nodes: int = DEFAULT_NODES,
    source: str | os.PathLike[str] | None = None,
    say: Say | None = None,
    addons: Sequence[str] = (),
) -> Cluster:
    """Bring the control plane in ``state_dir`` up (building binaries if needed).

    Reuses a healthy cluster, repairs one whose etcd and API server survive,
    otherwise starts a fresh one (see the module docstring). ``addons`` names
    optional workload controllers to run as well (:data:`addons.ADDONS`:
    ``jobset``, ``volcano``, ``trainer``; a cluster keeps those it already
    runs). Returns once the API server is ready, the CRDs are Established,
    ``nodes`` fake nodes are Ready and every addon is healthy;
    ``Cluster.kubeconfig`` is then written. Raises :class:`build.BuildError`
    or :class:`ClusterError` (naming the failing component and its log) on
    failure, leaving the processes it started running for inspection;
    ``down`` stops them. ValueError for an unknown addon name.
    """
    if not 1 <= nodes <= kwok.MAX_NODES:
        raise ValueError(f"nodes must be in 1..{kwok.MAX_NODES}, got {nodes}")
    requested = addon_specs.expand(addons)
    emit: Say = say or (lambda _msg: None)
    directory = (Path(state_dir) if state_dir is not None else default_state_dir()).resolve()
    with _locked(directory):
        cluster = load(directory)
        if cluster is not None:
            missing = [a for a in requested if a not in cluster.addons]
            statuses = {s.name: s for s in cluster.status()}
            if all(s.healthy for s in statuses.values()):
                emit(f"reusing the running cluster in {directory}")
                _add(cluster, missing, source=source, say=say, emit=emit)
                _finish(cluster, nodes=nodes, say=emit)
                return cluster
            core_ok = statuses["etcd"].healthy and statuses["kube-apiserver"].healthy
            binaries_ok = all(os.access(argv[0], os.X_OK) for argv in cluster._state["argv"].values())
            if core_ok and binaries_ok:
                dead = [n for n, s in statuses.items() if not s.running]
                emit(f"restarting {', '.join(dead) or 'unhealthy components'} of the running cluster")
                try:
                    for name in COMPONENTS:
                        cluster.start_component(name, wait=False)
                    cluster.wait_healthy(COMPONENTS)
                    _add(cluster, missing, source=source, say=say, emit=emit)
                    _finish(cluster, nodes=nodes, say=emit)
                    return cluster
                except ClusterError as err:
                    emit(f"repair failed ({err}); starting afresh")
            else:
                emit(f"the cluster recorded in {directory} is not running (stale state); starting afresh")
            # A fresh start keeps the optional components the old cluster had.
            requested = addon_specs.expand([*cluster.addons, *requested])
        elif (directory / "state.json").exists():
            emit(f"the state in {directory} is stale or unreadable; starting afresh")
        stopped = _stop_recorded(directory)
        if stopped:
            emit(f"stopped leftover processes: {', '.join(stopped)}")
        if "node" in requested:
            _node_prerequisites(directory, emit)
        binaries, versions = build.ensure_binaries(source=source, say=say, addons=addon_specs.modules(requested))
        _wipe(directory)
        started = time.monotonic()
        cluster = _fresh(
            directory, binaries={k: Path(v) for k, v in binaries.items()}, versions=versions, addons=requested,
            say=emit,
        )  # fmt: skip
        cluster.start_component("etcd")
        cluster.start_component("kube-apiserver")
        emit(f"apiserver ready after {time.monotonic() - started:.1f}s")
        for name in COMPONENTS[2:]:
            cluster.start_component(name, wait=False)
        _finish(cluster, nodes=nodes, say=emit)
        cluster.wait_healthy(cluster.components)
        emit(f"cluster ready after {time.monotonic() - started:.1f}s")
        return cluster


def _add(
    cluster: Cluster, names: Sequence[str], *, source: str | os.PathLike[str] | None, say: Say | None, emit: Say
) -> None:
    """Build (or find) and configure addons ``names`` on a running cluster; ``_finish`` starts them."""
    if not names:
        return
    emit(f"adding {', '.join(names)} to the running cluster")
    if "node" in names:
        _node_prerequisites(cluster.state_dir, emit)
    binaries, versions = build.ensure_binaries(source=source, say=say, addons=addon_specs.modules(names))
    cluster.add_addons(names, binaries={k: Path(v) for k, v in binaries.items()}, versions=versions, say=emit)


def _node_prerequisites(state_dir: Path, say: Say) -> None:
    """Fail early (before any build) where the real node cannot run or is taken; install its Debian packages."""
    node.check_host()
    node.check_owner(state_dir, alive=_node_alive)
    node.ensure_packages(say)


def down(state_dir: Path | str | None = None, *, purge: bool = False) -> list[str]:
    """Stop the processes the state directory's pid files name; return their names.

    Removes ``kubeconfig`` and ``state.json`` (the next ``up`` starts afresh)
    but keeps logs, PKI and etcd data for inspection; with ``purge``, deletes
    the state directory's whole contents.
    """
    directory = (Path(state_dir) if state_dir is not None else default_state_dir()).resolve()
    if not directory.exists():
        return []
    with _locked(directory):
        stopped = _stop_recorded(directory)
        if purge:
            _wipe(directory)
        else:
            # Keep logs, PKI and etcd data for inspection; forget the cluster.
            for leftover in ("kubeconfig", "state.json"):
                with contextlib.suppress(FileNotFoundError):
                    (directory / leftover).unlink()
    return stopped
