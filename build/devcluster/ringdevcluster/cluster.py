"""Run a real Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, owned by one state directory,
plus optional workload controllers (JobSet, Volcano, Kubeflow Trainer: see
:mod:`addons`) and a real node (:mod:`node`, started by
:meth:`Cluster.start_node`, torn down first by ``down``).

Design:

* **One state directory owns one cluster** (:mod:`state`: ``state.json``,
  PKI, etcd data, logs, pid files, the admin kubeconfig; a lock per command).
* **Processes are identified, not guessed** (:mod:`process`): ``down`` never
  signals a process that merely inherited a recycled pid, and never anything
  it did not start.
* **Each part configures itself into a** :class:`controlplane.Setup` (argv and
  environment per process, flags the API server needs): the control plane
  (:mod:`controlplane`), each optional component (:mod:`addons`, :mod:`node`).
  This module records them in ``state.json`` and runs them.
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
* The API is spoken with the standard library (:mod:`api`): the tool starts
  fast and needs no client package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ringdevcluster import addons as addon_specs
from ringdevcluster import build, controlplane, images, kwok, node, process
from ringdevcluster.api import Api, ApiError, condition_true, no_proxy_opener, probe
from ringdevcluster.controlplane import COMPONENTS, Setup, add_flags
from ringdevcluster.errors import ClusterError
from ringdevcluster.pki import Pki, write_kubeconfig
from ringdevcluster.process import GRACE_SECONDS, free_port, read_record, stop_pid_file
from ringdevcluster.state import VERSION, default_state_dir, locked, read_state, resolve, wipe, write_state

__all__ = [
    "COMPONENTS",
    "ApiError",
    "Cluster",
    "ClusterError",
    "ComponentStatus",
    "DEFAULT_NODES",
    "default_state_dir",
    "down",
    "ensure_up",
    "load",
]

DEFAULT_NODES = 4
_READY_TIMEOUT = 120.0
#: Seconds a cluster whose processes all run may take to answer its health checks
#: before ``ensure_up`` treats it as broken (a busy 2-core machine delays them).
_PROBE_GRACE = 30.0

Say = Callable[[str], None]


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
        #: The cluster's IP families (``controlplane.IP_FAMILIES``); state from before they were recorded is IPv4.
        self.ip_family: str = str(state.get("ip_family", "ipv4"))
        #: Whether the real node gives its pods a second network (``up --second-network``).
        self.second_network: bool = bool(state.get("second_network", False))
        #: Whether Multus attaches that network (``up --second-network --multus``; recorded as ``"multus"``).
        self.multus: bool = state.get("second_network") == "multus"
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
            state["ports"].update({key: free_port() for key in addon.ports})
            setup = addon_specs.configure(
                name,
                state_dir=self.state_dir,
                server=self.server,
                pki=self.pki,
                ports=state["ports"],
                binaries=binaries,
                ip_family=self.ip_family,
                second_network=self.second_network,
                multus=self.multus,
            )
            restart = _add_setup(state, setup) or restart
            state.setdefault("addons", []).append(name)
            state["versions"].update({m: versions[m] for m in addon_specs.modules([name])})
            say(f"configured {name}: {', '.join(p.name for p in addon.processes)}")
        write_state(self.state_dir, state)
        self._load_state(state)
        if restart:
            say("restarting kube-apiserver with the flags the new components need")
            self.stop_component("kube-apiserver")
            self.start_component("kube-apiserver")

    @functools.cached_property
    def api(self) -> Api:
        """Admin JSON client (created on first use: ``status`` of a half-wiped
        state directory must not fail on missing certificates)."""
        return Api(server=self.server, ca=self.pki.ca_cert, cert=self.pki.cert("admin"), key=self.pki.key("admin"))

    # -- process records ---------------------------------------------------

    def _pid_path(self, name: str) -> Path:
        return self.state_dir / "run" / f"{name}.pid"

    def log_path(self, name: str) -> Path:
        """Where component ``name`` writes its stdout and stderr."""
        return self.state_dir / "logs" / f"{name}.log"

    def _record(self, name: str) -> process.PidRecord | None:
        return read_record(self._pid_path(name))

    def pid(self, name: str) -> int | None:
        """The pid of component ``name`` if it is running (and ours), else None."""
        record = self._record(name)
        if record is None:
            return None
        if record.alive():
            return record.pid
        process.reap(record.pid)  # collect the exit status of a child of ours that died
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
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "ETCDCTL_ENDPOINTS")}
        env.update(self._state.get("env", {}).get(name, {}))
        pid = process.spawn(
            name,
            self._state["argv"][name],
            log_path=self.log_path(name),
            pid_path=self._pid_path(name),
            cwd=self.state_dir,
            env=env,
        )
        if wait:
            self.wait_healthy([name])
        return pid

    def stop_component(self, name: str, *, grace: float = GRACE_SECONDS) -> bool:
        """Stop component ``name`` (SIGTERM, then SIGKILL after ``grace`` s).

        Returns True if a process of ours was running. Only the process whose
        pid, start time and binary match the pid file is ever signalled.
        """
        return stop_pid_file(self._pid_path(name), grace=grace)

    def reload(self, name: str) -> None:
        """Make running component ``name`` re-read its configuration files (Prometheus: ``POST /-/reload``)."""
        if name != "prometheus":
            raise ClusterError(f"{name} has no configuration reload")
        url = f"http://127.0.0.1:{self.ports['prometheus-web']}/-/reload"
        try:
            with no_proxy_opener(None).open(urllib.request.Request(url, method="POST"), timeout=30) as resp:
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
        node.check_disk(self.state_dir)
        node.claim(
            self.state_dir,
            alive=_node_alive,
            release=lambda other: _release_node(other, say=say),
            say=say,
        )
        node.prepare_host(self.state_dir, ip_family=self.ip_family, second_network=self.second_network, say=say)
        self.start_component("containerd")
        if node.import_pause(self.state_dir):
            say(f"imported the sandbox image {images.PAUSE_IMAGE}")
        for name in node.PROCESSES[1:]:
            self.start_component(name, wait=False)
        self.wait_healthy(node.PROCESSES)
        healthy = time.monotonic() - started
        self.wait_addons_ready(only=("node",))
        node.assign_pod_cidrs(self.api, ip_family=self.ip_family)
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
            ok, body = probe(no_proxy_opener(None), f"http://127.0.0.1:{port}/health")
            return ok and '"health":"true"' in body.replace(" ", ""), body
        if name == "kube-apiserver":
            return probe(self.api.opener, f"{self.server}/readyz")
        if name == "kwok":
            return probe(no_proxy_opener(None), f"http://127.0.0.1:{port}/healthz")
        if name not in COMPONENTS:
            health = next(p.health for a in self.addons for p in addon_specs.ADDONS[a].processes if p.name == name)
            return probe(no_proxy_opener(None), f"http://127.0.0.1:{self.ports[health.port]}{health.path}")
        # controller-manager and scheduler serve /healthz with a self-signed cert.
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        return probe(no_proxy_opener(insecure), f"https://127.0.0.1:{port}/healthz")

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
                    raise ClusterError(
                        f"{name} exited during start-up; see {self.log_path(name)}\n{process.tail(self.log_path(name))}"
                    )
                ok, detail = self._health(name)
                if ok:
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"{name} not healthy after {timeout:.0f}s ({detail}); see {self.log_path(name)}\n"
                        + process.tail(self.log_path(name))
                    )
                time.sleep(0.1)

    # -- objects -----------------------------------------------------------

    def apply_crds(self) -> list[str]:
        """Create or update the harness CRDs and those of the addons; return their names.

        An addon's CRD replaces the harness's schema of the same name.
        """
        docs = {d["metadata"]["name"]: d for d in _crd_documents()}
        docs.update((d["metadata"]["name"], d) for d in node.multus_crds(self.state_dir))
        docs.update(
            (d["metadata"]["name"], d)
            for d in addon_specs.crd_documents(
                self.addons, binaries=self._addon_binaries(), ports=self.ports, ca_cert=self.ca_cert
            )
        )
        for name, doc in docs.items():
            self.api.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", doc)
        return list(docs)

    def apply_addon_objects(self) -> None:
        """Create or update the API objects the addons need (webhook registrations, queues)."""
        for name in self.addons:
            for path, obj in addon_specs.objects(
                name, ports=self.ports, binaries=self._addon_binaries(), ca_cert=self.ca_cert, ip_family=self.ip_family
            ):
                self.api.apply(path, obj)
        for path, obj in node.multus_objects(self.state_dir):
            self.api.apply(path, obj)

    def wait_addons_ready(self, *, timeout: float = _READY_TIMEOUT, only: Sequence[str] | None = None) -> None:
        """Wait until every addon's (or those in ``only``) own readiness conditions hold (e.g. Volcano's queue is Open)."""
        deadline = time.monotonic() + timeout
        while True:
            names = [n for n in self.addons if only is None or n in only]
            waiting = [item for name in names for item in addon_specs.pending(name, self.api.get)]
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
                if not condition_true(crd, "Established"):
                    pending.append(f"crd/{name}")
            listed = self.api.request("GET", "/api/v1/nodes?labelSelector=" + "%3D".join(kwok.NODE_LABEL))
            by_name = {n["metadata"]["name"]: n for n in listed.get("items", [])}
            for name in nodes:
                node = by_name.get(name)
                taints = (node or {}).get("spec", {}).get("taints") or []
                if node is None or not condition_true(node, "Ready"):
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


def load(state_dir: Path | str | None = None) -> Cluster | None:
    """The cluster recorded in ``state_dir`` (running or not), or None if none is."""
    directory = resolve(state_dir)
    recorded = read_state(directory)
    return Cluster(directory, recorded) if recorded is not None else None


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
    return stopped + [name for name in [*extra, *reversed(COMPONENTS)] if stop_pid_file(run / f"{name}.pid")]


def _stopper(state_dir: Path) -> Callable[[str], bool]:
    """``stop(name)`` for the components recorded in ``state_dir`` (see :func:`process.stop_pid_file`)."""
    return lambda name: stop_pid_file(state_dir / "run" / f"{name}.pid")


def _node_alive(state_dir: Path) -> bool:
    """True if the cluster in ``state_dir`` still runs (its node or its control plane), so still owns its node."""
    records = (read_record(state_dir / "run" / f"{name}.pid") for name in (*node.PROCESSES, *COMPONENTS))
    return any(r is not None and r.alive() for r in records)


def _release_node(state_dir: Path, *, say: Say) -> None:
    """Tear down the real node a dead cluster in ``state_dir`` left behind."""
    node.teardown(state_dir, stop=_stopper(state_dir), say=say)


def _stderr_say(message: str) -> None:
    print(f"ring-devcluster: {message}", file=sys.stderr, flush=True)


def _add_setup(recorded: dict[str, Any], setup: Setup) -> bool:
    """Add ``setup``'s processes to the state dict ``recorded``; True if the API server's argv changed."""
    recorded["argv"].update(setup.argv)
    recorded.setdefault("env", {}).update(setup.env)
    return add_flags(recorded["argv"]["kube-apiserver"], setup.apiserver_args)


def _fresh(
    state_dir: Path,
    *,
    binaries: dict[str, Path],
    versions: dict[str, str],
    addons: Sequence[str],
    ip_family: str = controlplane.DEFAULT_IP_FAMILY,
    second_network: bool = False,
    multus: bool = False,
    say: Say,
) -> Cluster:
    """Create PKI, configs and state for a new cluster of ``ip_family`` in an empty ``state_dir``."""
    ports = {name: free_port() for name in controlplane.PORTS}
    for name in addons:
        ports.update({key: free_port() for key in addon_specs.ADDONS[name].ports})
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    pki = Pki(state_dir / "pki")
    setup = controlplane.configure(
        state_dir=state_dir,
        server=server,
        pki=pki,
        ports=ports,
        binaries=binaries,
        kube=versions.get("kube"),
        ip_family=ip_family,
    )
    recorded: dict[str, Any] = {
        "version": VERSION,
        "server": server,
        "ports": ports,
        "versions": versions,
        "addons": list(addons),
        "ip_family": ip_family,
        "second_network": "multus" if second_network and multus else second_network,
        "argv": dict(setup.argv),
        "env": dict(setup.env),
        "created": time.time(),
    }
    for name in addons:
        _add_setup(
            recorded,
            addon_specs.configure(
                name,
                state_dir=state_dir,
                server=server,
                pki=pki,
                ports=ports,
                binaries=binaries,
                ip_family=ip_family,
                second_network=second_network,
                multus=multus,
            ),
        )
    write_state(state_dir, recorded)
    say(f"new cluster in {state_dir}: apiserver {server}, etcd :{ports['etcd']}, IP family {ip_family}")
    return Cluster(state_dir, recorded)


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
        client_key=cluster.pki.key("admin"), user=controlplane.ADMIN_USER,
    )  # fmt: skip


def ensure_up(
    *,
    state_dir: Path | str | None = None,
    nodes: int = DEFAULT_NODES,
    source: str | os.PathLike[str] | None = None,
    say: Say | None = None,
    addons: Sequence[str] = (),
    kube: str | None = None,
    ip_family: str | None = None,
    second_network: bool | None = None,
    multus: bool | None = None,
) -> Cluster:
    """Bring the control plane in ``state_dir`` up (building binaries if needed).

    ``kube`` is the Kubernetes release (``1.32``, ``1.32.13``: see
    :func:`ringdevcluster.kubeversions.resolve`; default
    ``$RING_DEVCLUSTER_KUBE``); None runs the pinned one, or keeps the
    release of the cluster recorded in ``state_dir``. A running
    cluster of another release is not replaced: :class:`ClusterError` says
    to stop it first. ``ip_family`` (``controlplane.IP_FAMILIES``; default
    ``$RING_DEVCLUSTER_IP_FAMILY``) likewise: None keeps the recorded
    cluster's, and a fresh cluster is ``dual`` (IPv4 first). ``second_network``
    (default ``$RING_DEVCLUSTER_SECOND_NETWORK=1``) gives the real node's pods
    a second network (:mod:`node`), for a new cluster only, like ``ip_family``;
    ``multus`` (default ``$RING_DEVCLUSTER_MULTUS=1``) attaches it through
    Multus (built from the Go module proxy) instead of a chained CNI configuration.

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
    directory = resolve(state_dir)
    wanted = build.resolve_kube(kube or os.environ.get("RING_DEVCLUSTER_KUBE") or None)
    family = ip_family or os.environ.get("RING_DEVCLUSTER_IP_FAMILY") or None
    if family is not None:
        controlplane.check_ip_family(family)
    second = second_network
    if second is None and os.environ.get("RING_DEVCLUSTER_SECOND_NETWORK"):
        second = os.environ["RING_DEVCLUSTER_SECOND_NETWORK"] == "1"
    with_multus = multus
    if with_multus is None and os.environ.get("RING_DEVCLUSTER_MULTUS"):
        with_multus = os.environ["RING_DEVCLUSTER_MULTUS"] == "1"
    if with_multus:
        second = True
    with locked(directory):
        cluster = load(directory)
        if cluster is not None:
            running = cluster.versions.get("kube")
            if wanted is not None and running != wanted:
                raise ClusterError(
                    f"the cluster in {directory} runs Kubernetes {running}, not {wanted}: stop it first "
                    f"(ring-devcluster down --state-dir {directory}) or give another --state-dir"
                )
            wanted = running
            if family is not None and cluster.ip_family != family:
                raise ClusterError(
                    f"the cluster in {directory} is {cluster.ip_family}, not {family}: stop it first "
                    f"(ring-devcluster down --state-dir {directory}) or give another --state-dir"
                )
            if second is not None and cluster.second_network != second:
                raise ClusterError(
                    f"the cluster in {directory} runs {'with' if cluster.second_network else 'without'} the second "
                    f"pod network: stop it first (ring-devcluster down --state-dir {directory}) or give another "
                    "--state-dir"
                )
            if with_multus is not None and cluster.multus != with_multus:
                raise ClusterError(
                    f"the cluster in {directory} runs {'with' if cluster.multus else 'without'} Multus: stop it "
                    f"first (ring-devcluster down --state-dir {directory}) or give another --state-dir"
                )
            # A restart keeps a recorded family; one from before families were recorded gets the default.
            family = family or cluster._state.get("ip_family")
            second = cluster.second_network
            with_multus = cluster.multus
            missing = [a for a in requested if a not in cluster.addons]
            statuses = {s.name: s for s in settled_status(cluster.status, grace=_PROBE_GRACE, say=emit)}
            if all(s.healthy for s in statuses.values()):
                emit(f"reusing the running cluster in {directory}")
                _add(cluster, missing, source=source, say=say, emit=emit, kube=wanted)
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
                    _add(cluster, missing, source=source, say=say, emit=emit, kube=wanted)
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
        modules = addon_specs.modules(requested) + (["multus"] if with_multus else [])
        binaries, versions = build.ensure_binaries(source=source, say=say, addons=modules, kube=wanted)
        wipe(directory)
        started = time.monotonic()
        cluster = _fresh(
            directory, binaries={k: Path(v) for k, v in binaries.items()}, versions=versions, addons=requested,
            ip_family=family or controlplane.DEFAULT_IP_FAMILY, second_network=bool(second),
            multus=bool(with_multus), say=emit,
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


def settled_status(
    status: Callable[[], list[ComponentStatus]], *, grace: float, say: Say, interval: float = 1.0
) -> list[ComponentStatus]:
    """``status()``, asked again for up to ``grace`` seconds while every process runs but some health
    check fails: a slow answer on a loaded machine must not make ``ensure_up`` restart, or wipe, a
    live cluster. A process that is not running ends the wait at once (nothing to wait for)."""
    deadline = time.monotonic() + grace
    found = status()
    said = False
    while not all(s.healthy for s in found) and all(s.running for s in found) and time.monotonic() < deadline:
        if not said:
            slow = ", ".join(s.name for s in found if not s.healthy)
            say(f"{slow} running but not answering its health check; asking again for up to {grace:g}s")
            said = True
        time.sleep(interval)
        found = status()
    return found


def _add(
    cluster: Cluster,
    names: Sequence[str],
    *,
    source: str | os.PathLike[str] | None,
    say: Say | None,
    emit: Say,
    kube: str | None,
) -> None:
    """Build (or find) and configure addons ``names`` on a running cluster; ``_finish`` starts them."""
    if not names:
        return
    emit(f"adding {', '.join(names)} to the running cluster")
    if "node" in names:
        _node_prerequisites(cluster.state_dir, emit)
    # The node's kubelet and kube-proxy are of the control plane's release.
    binaries, versions = build.ensure_binaries(source=source, say=say, addons=addon_specs.modules(names), kube=kube)
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
    directory = resolve(state_dir)
    if not directory.exists():
        return []
    with locked(directory):
        stopped = _stop_recorded(directory)
        if purge:
            wipe(directory)
        else:
            # Keep logs, PKI and etcd data for inspection; forget the cluster.
            for leftover in ("kubeconfig", "state.json"):
                with contextlib.suppress(FileNotFoundError):
                    (directory / leftover).unlink()
    return stopped
