"""Optional components of the local control plane: JobSet, Volcano, Kubeflow Trainer, Kueue, LWS, a real node.

``ring-devcluster up --with jobset,volcano,trainer`` runs the real controllers
next to the control plane, so a JobSet becomes Jobs and pods through the
JobSet and Job controllers, a Volcano Job becomes a PodGroup and pods through
Volcano's controller manager and scheduler, and a TrainJob becomes a JobSet
through Trainer. ``--with kueue`` adds Kueue in front of JobSets and
TrainJobs: one labelled ``kueue.x-k8s.io/queue-name`` is created suspended
and runs once Kueue admits it (see :data:`KUEUE_FRAMEWORKS`). ``--with lws`` runs the
LeaderWorkerSet controller: a LeaderWorkerSet becomes a leader StatefulSet,
then one worker StatefulSet per leader pod. Each is built from the Go module proxy like the rest
(:data:`build.ADDON_MODULES`); this module says how each one is installed and
run on loopback:

* **CRDs are the product's own**, copied at build time from the module source
  that was compiled (``<entry>/assets``). They replace the harness's
  hand-written schemas of the same name (``crds/*.yaml``): the real
  controllers need their full schemas (Volcano's PodGroup, Queue and Command
  kinds, which the harness does not define at all, and the exact types and
  defaults the controllers were generated against), and tests on such a
  cluster check ring-controller against what production clusters run.
* **Webhooks are served, not skipped.** JobSet defaults every JobSet in its
  mutating webhook (Indexed completion mode, success and startup policies,
  DNS hostnames); Trainer defaults TrainJobs (the time of each runtime
  patch) and validates its objects. A loopback API server
  cannot reach a webhook through a Service (there is no kube-proxy), so each
  webhook is registered by URL (``https://127.0.0.1:<port>/<path>``, paths
  and rules taken from the product's own webhook manifest) with the cluster
  CA as ``caBundle``, and the controller serves a certificate for 127.0.0.1
  issued by that CA. JobSet's in-process certificate rotation is switched off
  through its configuration file (``internalCertManagement.enable: false``);
  Trainer's cannot be, so its wrapper module has its own entry point (see
  ``build/devcluster/trainer/main.go``). Pod webhooks only see their
  product's pods (the object selectors of the products' own manifests:
  ``jobset.sigs.k8s.io/jobset-name`` for JobSet's,
  ``leaderworkerset.sigs.k8s.io/name`` for LWS's).
* **LWS** labels its pods in its pod webhook (a worker's
  ``worker-index`` from its ordinal, a leader's ``group-index``), so the
  webhook is what a LeaderWorkerSet's pods need to be identified at all.
  Its configuration file switches its certificate rotation off, like
  JobSet's. Its DisaggregatedSet CRD is installed too: the same binary runs
  that controller, which waits for its kind to exist.
* **Volcano** runs its controller manager (job, podgroup, queue and garbage
  collection controllers) and its scheduler (``schedulerName: volcano``): the
  job controller creates pods only once the scheduler has admitted the job's
  PodGroup (phase ``Inqueue``), so one is useless without the other. The
  queue ``default`` is created by the harness (and waited for ``Open``).
  Volcano's admission webhooks are not run (its webhook manager only fills
  the CA bundle of webhook registrations that exist solely as Helm
  templates): jobs must be written out as that webhook would default them
  (``schedulerName: volcano``, ``minAvailable`` and each task's
  ``minAvailable``). The Job CRD itself defaults ``maxRetry: 3`` (since
  v1.11; before, an unset ``maxRetry``, 0, failed a job at its first
  restart) and ``queue: default`` (since v1.14).
* **Kueue** runs its controllers, scheduler and webhooks in one process
  (``build/devcluster/kueue/main.go`` says how its entry point differs from
  upstream's), with the job integrations of :data:`KUEUE_FRAMEWORKS` and
  Topology Aware Scheduling (a beta feature, on by default). Its own kinds
  (Workload, ClusterQueue, LocalQueue, Cohort) are served in two versions and
  convert through its webhook, registered by URL like the admission
  webhooks: the CRDs that convert are those upstream's kustomization patches
  (``config/components/crd/kustomization.yaml``). Of its admission webhooks,
  only those of its own kinds and of the integrations run are registered:
  its pod webhooks (plain pods, a framework not enabled here) would stand in
  front of every pod of the cluster.
* Every process binds to 127.0.0.1 only, runs with leader election off and
  authenticates with a client certificate in ``system:masters`` (a dev
  cluster: the products' RBAC roles are not what is under test).

The real node (``--with node``: kubelet, kube-proxy, containerd, CoreDNS)
is an addon too, for its ports, configuration, objects and readiness; what
it does to the host (bridge, sysctls, clean-up) and the order its processes
need are in :mod:`node`.

Prometheus (``--with prometheus``, which brings ``node``: there is nothing
to scrape without real pods) is a host process too, like CoreDNS: it finds
the controller's pods through Kubernetes service discovery, with a client
certificate whose user may only read pods (:func:`objects` binds it), and
scrapes their IPs on the node's bridge. Its scrape job and alert rules are
derived from build/monitoring.yaml (:mod:`prometheus`); ``up`` rewrites them
on every run (:func:`refresh`) and the running server reloads them.

An addon is a row of :data:`ADDONS`; :mod:`cluster` allocates its ports,
calls :func:`configure` once (files, certificates, argv), applies
:func:`objects` after the CRDs, starts its processes after the control plane
and waits for :func:`pending` to be empty.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ringdevcluster import node
from ringdevcluster import prometheus as prom
from ringdevcluster.controlplane import DEFAULT_IP_FAMILY, Setup
from ringdevcluster.pki import Pki, write_kubeconfig

__all__ = [
    "ADDONS",
    "Addon",
    "Health",
    "Process",
    "VOLCANO_DEFAULT_QUEUE",
    "KUEUE_FRAMEWORKS",
    "VOLCANO_SCHEDULER",
    "configure",
    "crd_documents",
    "describe",
    "expand",
    "modules",
    "objects",
    "pending",
    "process_names",
    "PROMETHEUS_SCRAPE_INTERVAL",
    "PROMETHEUS_USER",
    "refresh",
]

Json = dict[str, Any]

#: The scheduler name Volcano's scheduler and controllers answer to.
VOLCANO_SCHEDULER = "volcano"
#: The Volcano queue jobs go to when they name none.
VOLCANO_DEFAULT_QUEUE = "default"
#: The job integrations Kueue runs here (its configuration's
#: ``integrations.frameworks``): the workload kinds ring-controller serves
#: that Kueue v0.19 admits. Its pod, Job, Deployment, StatefulSet and LWS
#: integrations are left out: the tests create such objects by hand, and
#: Kueue would gate their pods.
KUEUE_FRAMEWORKS = ("jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob")
#: The dev cluster's scrape and rule evaluation interval (the PodMonitor's is
#: 30s): short, so a test sees rates and alert states within seconds.
PROMETHEUS_SCRAPE_INTERVAL = "5s"
#: The user Prometheus's service discovery authenticates as (reads pods only).
PROMETHEUS_USER = "ring-devcluster-prometheus"


_VOLCANO_SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


@dataclasses.dataclass(frozen=True)
class Health:
    """Where a process answers "healthy": ``http://127.0.0.1:<ports[port]><path>``."""

    port: str
    path: str


@dataclasses.dataclass(frozen=True)
class Process:
    """One process of an addon: its component name, binary and health check."""

    name: str
    binary: str
    health: Health


@dataclasses.dataclass(frozen=True)
class Addon:
    """An optional workload controller: the processes it runs and what they need.

    ``ports`` are the loopback ports to allocate (keys of ``Cluster.ports``);
    ``crds`` glob the CRD manifests among the module's assets; ``requires``
    names addons that must run too (Trainer makes JobSets); ``modules`` are
    the wrapper modules to build (default: the one named like the addon).
    """

    name: str
    summary: str
    processes: tuple[Process, ...]
    ports: tuple[str, ...]
    crds: tuple[str, ...]
    requires: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()


ADDONS: dict[str, Addon] = {
    a.name: a
    for a in (
        Addon(
            name="jobset",
            summary="JobSet controller (sigs.k8s.io/jobset) with its webhooks",
            processes=(Process("jobset-controller", "jobset", Health("jobset-health", "/readyz")),),
            ports=("jobset-health", "jobset-webhook"),
            crds=("config/components/crd/bases/*.yaml",),
        ),
        Addon(
            name="volcano",
            summary="Volcano controller manager and scheduler (volcano.sh/volcano)",
            processes=(
                Process(
                    "volcano-controller-manager", "controller-manager", Health("volcano-controller-manager", "/healthz")
                ),
                Process("volcano-scheduler", "scheduler", Health("volcano-scheduler", "/healthz")),
            ),
            ports=("volcano-controller-manager", "volcano-scheduler", "volcano-scheduler-metrics"),
            crds=("config/crd/volcano/bases/*.yaml",),
        ),
        Addon(
            name="trainer",
            summary="Kubeflow Trainer v2 controller manager with its webhooks",
            processes=(Process("trainer-controller-manager", "trainer", Health("trainer-health", "/readyz")),),
            ports=("trainer-health", "trainer-webhook"),
            crds=("manifests/base/crds/trainer.kubeflow.org_*.yaml",),
            requires=("jobset",),
        ),
        Addon(
            name="node",
            summary="a real node: kubelet, kube-proxy, containerd + runc, CNI bridge, CoreDNS (root)",
            processes=(
                Process("containerd", "containerd", Health("containerd-metrics", "/v1/metrics")),
                Process("coredns", "coredns", Health("coredns-ready", "/ready")),
                Process("apiserver-relay", "relay", Health("apiserver-relay-health", "/healthz")),
                Process("kube-proxy", "kube-proxy", Health("kube-proxy-health", "/healthz")),
                Process("kubelet", "kubelet", Health("kubelet-health", "/healthz")),
            ),
            ports=(
                "containerd-metrics",
                "coredns-health",
                "coredns-ready",
                "coredns-metrics",
                "apiserver-relay-health",
                "kube-proxy-health",
                "kube-proxy-metrics",
                "kubelet-health",
            ),
            crds=(),
            modules=("node", "coredns"),
        ),
        Addon(
            name="prometheus",
            summary="Prometheus scraping the ring-controller pods (build/monitoring.yaml's PodMonitor and rules)",
            processes=(Process("prometheus", "prometheus", Health("prometheus-web", "/-/ready")),),
            ports=("prometheus-web",),
            crds=(),
            requires=("node",),
        ),
        # Last: a new row takes ports after those of the rows above (devcluster_argv.json).
        Addon(
            name="kueue",
            summary="Kueue (sigs.k8s.io/kueue) admitting JobSets and TrainJobs, with Topology Aware Scheduling",
            processes=(Process("kueue-controller-manager", "kueue", Health("kueue-health", "/readyz")),),
            ports=("kueue-health", "kueue-webhook"),
            crds=("config/components/crd/bases/*.yaml",),
            requires=("jobset",),
        ),
        Addon(
            name="lws",
            summary="LeaderWorkerSet controller (sigs.k8s.io/lws) with its webhooks",
            processes=(Process("lws-controller", "lws-controller", Health("lws-health", "/readyz")),),
            ports=("lws-health", "lws-webhook"),
            crds=("config/crd/bases/*.yaml",),
        ),
    )
}


def expand(names: Sequence[str]) -> list[str]:
    """``names`` plus what they require, in :data:`ADDONS` order; ValueError on an unknown name."""
    unknown = [n for n in names if n not in ADDONS]
    if unknown:
        raise ValueError(f"unknown component(s) {', '.join(unknown)}; choose from {', '.join(ADDONS)}")
    wanted = set(names)
    for name in list(wanted):
        wanted.update(ADDONS[name].requires)
    return [n for n in ADDONS if n in wanted]


def modules(names: Sequence[str]) -> list[str]:
    """The wrapper modules (``build.ADDON_MODULES``) addons ``names`` need, in order, without repeats."""
    return list(dict.fromkeys(m for n in names for m in (ADDONS[n].modules or (n,))))


def process_names(names: Sequence[str]) -> list[str]:
    """The component names of the processes of addons ``names``, in start order."""
    return [p.name for n in names for p in ADDONS[n].processes]


def _assets(binaries: Mapping[str, Path], addon: Addon) -> Path:
    return Path(binaries[addon.processes[0].binary]).parent / "assets"


def _serving_cert(pki: Pki, *, name: str, directory: Path) -> Path:
    """A serving certificate for 127.0.0.1 signed by the cluster CA, as ``tls.crt``/``tls.key`` in ``directory``."""
    cert, key = pki.issue(name, cn=name, server_names=["localhost"], server_ips=["127.0.0.1"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert.read_bytes())
    (directory / "tls.key").write_bytes(key.read_bytes())
    (directory / "tls.key").chmod(0o600)
    return directory


def _kubeconfig(pki: Pki, *, state_dir: Path, server: str, process: str) -> Path:
    cn = f"ring-devcluster-{process}"
    cert, key = pki.issue(process, cn=cn, groups=["system:masters"])
    return write_kubeconfig(
        state_dir / "kubeconfigs" / f"{process}.kubeconfig",
        server=server, ca_cert=pki.ca_cert, client_cert=cert, client_key=key, user=cn,
    )  # fmt: skip


def configure(
    name: str,
    *,
    state_dir: Path,
    server: str,
    pki: Pki,
    ports: Mapping[str, int],
    binaries: Mapping[str, Path],
    ip_family: str = DEFAULT_IP_FAMILY,
    second_network: bool = False,
    multus: bool = False,
) -> Setup:
    """Write addon ``name``'s kubeconfigs, certificates and configuration under
    ``state_dir``; return the argv and environment of its processes (and the
    flags it needs the API server to have).

    Call once per cluster (again only after the state directory was wiped):
    it issues new certificates. ``binaries`` maps binary names to their cached
    paths (:func:`build.ensure_binaries`); ``ip_family`` is the cluster's
    (``controlplane.IP_FAMILIES``); ``second_network`` gives the real node its second pod network
    (attached by Multus with ``multus``).
    """
    addon = ADDONS[name]
    if name == "node":
        return node.configure(
            state_dir=state_dir,
            server=server,
            pki=pki,
            ports=ports,
            binaries=binaries,
            ip_family=ip_family,
            second_network=second_network,
            multus=multus,
        )
    home = state_dir / "addons" / name
    home.mkdir(parents=True, exist_ok=True)
    if name == "prometheus":
        cert, key = pki.issue("prometheus", cn=PROMETHEUS_USER)  # no group: RBAC from objects() only
        write_kubeconfig(
            home / "kubeconfig", server=server, ca_cert=pki.ca_cert, client_cert=cert, client_key=key,
            user=PROMETHEUS_USER,
        )  # fmt: skip
        refresh(name, state_dir=state_dir)
        argv = {
            "prometheus": [
                str(binaries["prometheus"]),
                f"--config.file={home / 'prometheus.yml'}",
                f"--storage.tsdb.path={home / 'data'}",
                "--storage.tsdb.retention.time=1d",
                f"--web.listen-address=127.0.0.1:{ports['prometheus-web']}",
                "--web.enable-lifecycle",  # POST /-/reload after refresh()
                "--log.level=info",
            ]
        }
        return Setup(argv=argv, env={})
    kc = {p.name: _kubeconfig(pki, state_dir=state_dir, server=server, process=p.name) for p in addon.processes}
    exe = {p.name: str(binaries[p.binary]) for p in addon.processes}
    if name in ("jobset", "lws"):
        return _controller_runtime(name, home=home, pki=pki, ports=ports, exe=exe, kubeconfigs=kc)
    if name == "volcano":
        # Volcano's default actions and plugins (enqueue admits a PodGroup,
        # gang holds its pods until all fit), written out: without a file the
        # scheduler logs an error on every configuration reload.
        (home / "scheduler.conf").write_text(_VOLCANO_SCHEDULER_CONF)
        common = ["--leader-elect=false", "--enable-healthz", f"--scheduler-name={VOLCANO_SCHEDULER}", "--v=2"]
        argv = {
            "volcano-controller-manager": [
                exe["volcano-controller-manager"],
                f"--kubeconfig={kc['volcano-controller-manager']}",
                *common,
                f"--healthz-address=127.0.0.1:{ports['volcano-controller-manager']}",
                # Jobs, their PodGroups, queues, finished-job clean-up; not the
                # JobFlow/JobTemplate controllers (their CRDs are not installed).
                "--controllers=job-controller,pg-controller,queue-controller,gc-controller",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
            ],
            "volcano-scheduler": [
                exe["volcano-scheduler"],
                f"--kubeconfig={kc['volcano-scheduler']}",
                *common,
                f"--healthz-address=127.0.0.1:{ports['volcano-scheduler']}",
                f"--listen-address=127.0.0.1:{ports['volcano-scheduler-metrics']}",
                f"--scheduler-conf={home / 'scheduler.conf'}",
                f"--default-queue={VOLCANO_DEFAULT_QUEUE}",
                "--cache-dumper=false",
                "--schedule-period=200ms",
            ],
        }
        # The scheduler serves its log-level socket in $DEBUG_SOCKET_DIR
        # (default /tmp/klog-socks, shared by every cluster on the machine);
        # a vGPU device package initialises its own client from $KUBECONFIG
        # (else ~/.kube/config) in both binaries.
        sockets = home / "sockets"
        sockets.mkdir(exist_ok=True)
        env = {p: {"KUBECONFIG": str(kc[p])} for p in argv}
        env["volcano-scheduler"]["DEBUG_SOCKET_DIR"] = str(sockets)
        return Setup(argv=argv, env=env)
    if name == "kueue":
        # Only jobs that name a LocalQueue (label kueue.x-k8s.io/queue-name) are Kueue's.
        extra = {"manageJobsWithoutQueueName": False, "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)}}
        return _controller_runtime(name, home=home, pki=pki, ports=ports, exe=exe, kubeconfigs=kc, extra=extra)
    if name == "trainer":
        certs = _serving_cert(pki, name="trainer-webhook", directory=home / "certs")
        argv = {
            "trainer-controller-manager": [
                exe["trainer-controller-manager"],
                f"--kubeconfig={kc['trainer-controller-manager']}",
                f"--health-probe-bind-address=127.0.0.1:{ports['trainer-health']}",
                "--webhook-host=127.0.0.1",
                f"--webhook-port={ports['trainer-webhook']}",
                f"--webhook-cert-dir={certs}",
                "--zap-encoder=console",
            ]
        }
        return Setup(argv=argv, env={})
    raise AssertionError(f"no configuration for addon {name}")


#: Each controller-runtime addon's Configuration apiVersion.
_CONFIG_API = {
    "jobset": "config.jobset.x-k8s.io/v1alpha1",
    "lws": "config.lws.x-k8s.io/v1alpha1",
    "kueue": "config.kueue.x-k8s.io/v1beta2",
}


def _controller_runtime(
    name: str,
    *,
    home: Path,
    pki: Pki,
    ports: dict[str, int],
    exe: dict[str, str],
    kubeconfigs: dict[str, Path],
    extra: dict[str, Any] | None = None,
) -> Setup:
    """The one process of a controller-runtime addon (JobSet, LWS, Kueue), run from a Configuration file:
    no leader election, no certificate rotation (its serving certificate is issued here and already
    trusted), webhook and health on loopback, no metrics listener, a client rate fit for a busy test
    cluster; ``extra`` adds that product's own keys."""
    certs = _serving_cert(pki, name=f"{name}-webhook", directory=home / "certs")
    config = {
        "apiVersion": _CONFIG_API[name],
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": ports[f"{name}-webhook"], "certDir": str(certs)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports[f'{name}-health']}"},
        "clientConnection": {"qps": 100, "burst": 200},
        **(extra or {}),
    }
    (home / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    process = f"{name}-controller" if name != "kueue" else "kueue-controller-manager"
    argv = [exe[process], f"--kubeconfig={kubeconfigs[process]}", f"--config={home / 'config.yaml'}"]
    if name != "kueue":
        argv.append("--zap-devel=false")
    return Setup(argv={process: [*argv, "--zap-encoder=console"]}, env={})


def refresh(name: str, *, state_dir: Path) -> bool:
    """Rewrite the files addon ``name`` derives from the checkout; True if any changed.

    Only Prometheus has such files: its scrape job and rules, from
    build/monitoring.yaml (:func:`prometheus.config`), so a cluster that is
    reused runs the monitoring objects of the checkout that calls ``up``.
    """
    if name != "prometheus":
        return False
    home = state_dir / "addons" / name
    main, rules = prom.config(
        kubeconfig=home / "kubeconfig", rules_file=home / "rules.yaml", interval=PROMETHEUS_SCRAPE_INTERVAL
    )
    changed = False
    for file, content in (("prometheus.yml", main), ("rules.yaml", rules)):
        text = yaml.safe_dump(content, sort_keys=False)
        path = home / file
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed = True
    return changed


#: The labels that select the pods each product's pod webhooks see.
_JOBSET_POD_LABEL = "jobset.sigs.k8s.io/jobset-name"
_LWS_POD_LABEL = "leaderworkerset.sigs.k8s.io/name"


def _load_all(path: Path) -> list[Json]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the JobSet CRD is 0.8 MB of YAML
    with open(path, encoding="utf-8") as stream:
        return [d for d in yaml.load_all(stream, Loader=loader) if d]


def crd_documents(
    names: Sequence[str], *, binaries: Mapping[str, Path], ports: Mapping[str, int], ca_cert: Path
) -> list[Json]:
    """The CRDs addons ``names`` bring (from their build's assets), in addon order.

    CRDs whose versions convert through an addon's webhook (Kueue's) call it
    by URL at 127.0.0.1 (``ports``), trusting ``ca_cert``.
    """
    docs: list[Json] = []
    for name in names:
        addon = ADDONS[name]
        assets = _assets(binaries, addon)
        converted = _kueue_converted(assets) if name == "kueue" else set()
        for pattern in addon.crds:
            files = sorted(assets.glob(pattern))
            if not files:
                raise FileNotFoundError(
                    f"no CRD matches {pattern} in {assets}; rebuild with `ring-devcluster build --with {name}`"
                )
            for path in files:
                for doc in _load_all(path):
                    if doc.get("kind") != "CustomResourceDefinition":
                        continue
                    if doc["metadata"]["name"] in converted:
                        doc["spec"]["conversion"] = _conversion(port=ports[f"{name}-webhook"], ca=ca_cert.read_bytes())
                    docs.append(doc)
    return docs


def _kueue_converted(assets: Path) -> set[str]:
    """The CRDs Kueue's kustomization gives a conversion webhook (its active ``webhook_in_*`` patches)."""
    base = assets / "config/components/crd"
    kustomization = _load_all(base / "kustomization.yaml")[0]
    names = set()
    for patch in kustomization.get("patches") or []:
        path = str(patch.get("path", ""))
        if Path(path).name.startswith("webhook_in_"):
            names.update(d["metadata"]["name"] for d in _load_all(base / path))
    if not names:
        raise FileNotFoundError(f"no conversion webhook patch in {base / 'kustomization.yaml'}")
    return names


def _conversion(*, port: int, ca: bytes) -> Json:
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": base64.b64encode(ca).decode()},
            "conversionReviewVersions": ["v1"],
        },
    }


def _webhooks_by_url(
    manifest: Path,
    *,
    names: Mapping[str, str],
    port: int,
    ca: bytes,
    keep: Callable[[str], bool] = lambda _p: True,
    pod_label: str = _JOBSET_POD_LABEL,
) -> list[Json]:
    """The product's webhook configurations, called by URL at 127.0.0.1:``port``.

    ``names`` renames the configurations (upstream names are kustomize
    placeholders); pod webhooks only see pods labelled ``pod_label`` (the
    object selector the product's own deployment adds). Only the webhooks
    whose path ``keep`` accepts are registered.
    """
    out = []
    for doc in _load_all(manifest):
        kind = doc["kind"]
        config = copy.deepcopy(doc)
        config["metadata"] = {"name": names[kind], "labels": {"app.kubernetes.io/managed-by": "ring-devcluster"}}
        config["webhooks"] = [h for h in config.get("webhooks") or [] if keep(h["clientConfig"]["service"]["path"])]
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()}
            if any("pods" in (rule.get("resources") or []) for rule in hook.get("rules") or []):
                hook["objectSelector"] = {"matchExpressions": [{"key": pod_label, "operator": "Exists"}]}
        out.append(config)
    return out


_WEBHOOK_PATHS = {
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}


def objects(
    name: str,
    *,
    ports: Mapping[str, int],
    binaries: Mapping[str, Path],
    ca_cert: Path,
    ip_family: str = DEFAULT_IP_FAMILY,
) -> list[tuple[str, Json]]:
    """The API objects addon ``name`` needs, as ``(object URL path, manifest)`` to server-side apply,
    in a cluster of ``ip_family``.

    Apply them after the CRDs are established and before the processes
    start: a webhook registered before its server listens only delays the
    first requests (they fail, and clients retry), never skips validation.
    """
    addon = ADDONS[name]
    ca = ca_cert.read_bytes()
    out: list[tuple[str, Json]] = []
    if name == "jobset":
        manifest = _assets(binaries, addon) / "config/components/webhook/manifests.yaml"
        names = {
            "MutatingWebhookConfiguration": "jobset-mutating-webhook-configuration",
            "ValidatingWebhookConfiguration": "jobset-validating-webhook-configuration",
        }
        for config in _webhooks_by_url(manifest, names=names, port=ports["jobset-webhook"], ca=ca):
            out.append((f"{_WEBHOOK_PATHS[config['kind']]}/{config['metadata']['name']}", config))
    elif name == "trainer":
        manifest = _assets(binaries, addon) / "manifests/base/webhook/manifests.yaml"
        names = {  # the names upstream's entry point gives them
            "MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org",  # since v2.3: TrainJob runtimePatches
            "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org",
        }
        for config in _webhooks_by_url(manifest, names=names, port=ports["trainer-webhook"], ca=ca):
            out.append((f"{_WEBHOOK_PATHS[config['kind']]}/{config['metadata']['name']}", config))
    elif name == "kueue":
        manifest = _assets(binaries, addon) / "config/components/webhook/manifests.yaml"
        names = {
            "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
            "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
        }
        for config in _webhooks_by_url(manifest, names=names, port=ports["kueue-webhook"], ca=ca, keep=_kueue_webhook):
            out.append((f"{_WEBHOOK_PATHS[config['kind']]}/{config['metadata']['name']}", config))
    elif name == "lws":
        manifest = _assets(binaries, addon) / "config/webhook/manifests.yaml"
        names = {  # upstream's kustomize names them with its "lws-" prefix
            "MutatingWebhookConfiguration": "lws-mutating-webhook-configuration",
            "ValidatingWebhookConfiguration": "lws-validating-webhook-configuration",
        }
        hooks = _webhooks_by_url(manifest, names=names, port=ports["lws-webhook"], ca=ca, pod_label=_LWS_POD_LABEL)
        for config in hooks:
            out.append((f"{_WEBHOOK_PATHS[config['kind']]}/{config['metadata']['name']}", config))
    elif name == "volcano":
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": VOLCANO_DEFAULT_QUEUE},
            "spec": {"weight": 1, "reclaimable": True},
        }
        out.append((f"/apis/scheduling.volcano.sh/v1beta1/queues/{VOLCANO_DEFAULT_QUEUE}", queue))
    elif name == "node":
        out.extend(node.objects(ip_family=ip_family))
    elif name == "prometheus":
        role = f"{PROMETHEUS_USER}"
        labels = {"app.kubernetes.io/managed-by": "ring-devcluster"}
        out.append(
            (
                f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": role, "labels": labels},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
                },
            )
        )
        out.append(
            (
                f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": role, "labels": labels},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": PROMETHEUS_USER}],
                },
            )
        )
    return out


#: Path fragments of the Kueue webhooks registered: its own kinds and the integrations run.
_KUEUE_WEBHOOK_GROUPS = ("-kueue-x-k8s-io-", "-jobset-x-k8s-io-", "-trainer-kubeflow-org-")


def _kueue_webhook(path: str) -> bool:
    return any(group in path for group in _KUEUE_WEBHOOK_GROUPS)


def pending(name: str, get: Callable[[str], Json | None]) -> list[str]:
    """What addon ``name`` still waits for once its processes are healthy (empty: ready).

    ``get(path)`` returns the JSON object at an API path, or None if absent.
    """
    if name == "volcano":
        queue = get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{VOLCANO_DEFAULT_QUEUE}")
        state = ((queue or {}).get("status") or {}).get("state")
        if state != "Open":
            return [f"volcano queue/{VOLCANO_DEFAULT_QUEUE} (state {state or 'unset'}, not Open)"]
    if name == "node":
        return node.pending(get)
    return []


def describe(names: Sequence[str]) -> str:
    """One line per addon: name and summary (for ``--help``)."""
    return "\n".join(f"  {a.name:<10} {a.summary}" for a in ADDONS.values() if a.name in names)
