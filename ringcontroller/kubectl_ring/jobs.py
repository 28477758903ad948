"""From the raw objects read to job views: the daemon's and the launcher's own rules, applied once.

Pure: :class:`Snapshot` holds what :mod:`~ringcontroller.kubectl_ring.api`
read; :func:`views` turns it into one :class:`JobView` per served job with
exactly the records, the serving rule and the decision the daemon would use
(:func:`agent.decide.explain`, which returns :func:`~agent.decide.decide`'s
decision with its reasons); :func:`pod_env` computes what ``ring-launch``
exports in a pod from the ConfigMap's files, with the launcher's own judge
and derivation. Nothing here is a second copy of a rule: where the plugin
needs a reason, the lower layers expose it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from agent.decide import STATUS_INVALID, Explanation, JobStatus, Problem, blocked, explain
from model.configmap import configmap_record
from model.hypernode import HyperNodeIndex, hypernode_record
from model.keys import CONFIG_VOLUME_NAMES, DEFAULT_PORT
from model.kinds import KINDS, WorkloadKind
from model.network import claim_record
from model.pod import as_group_member, pod_record, with_claim_networks
from model.records import ConfigMapRecord, JobKey, PodRecord, WorkloadRecord, key_of, object_key
from model.serving import serving_workload
from model.topology import RULE_SPEC, RankOrder, RankRule, node_path, rule_for
from ranktable.clusterspec import CLUSTER_FILE, HCCL_FILE, ClusterSpec, SpecError, spec_from_json
from ranktable.hccl import DEFAULT_CHOICE
from ranktable.launch.launcher import launch_env, launch_options
from ranktable.launch.pyzfile import PYZ_NAME
from ranktable.launch.wait import DEFAULT_CONFIG_DIR, Identity, Judge, Observation, Ready
from ranktable.stored import RANK_TABLE_DIR_ENV, files_from_configmap

Json = dict[str, Any]

#: A job's spec status as the plugin shows it: a :data:`agent.decide.JobStatus`
#: (the written spec's status, or ``invalid`` when the controller cannot write
#: one), ``absent`` when no spec ConfigMap exists yet (the controller has not
#: synced the job), ``unreadable`` when its ``cluster.json`` is missing or
#: malformed.
ShownStatus = Literal[JobStatus, "absent", "unreadable"]
STATUS_ABSENT: Final[ShownStatus] = "absent"
STATUS_UNREADABLE: Final[ShownStatus] = "unreadable"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Raw objects read from the API server, in one scope (a namespace or all).

    ``workloads``: (kind short name, object) for every labelled workload;
    ``pods``: every labelled pod; ``configmaps``: by ``namespace/name``, the
    managed ConfigMaps and any other the jobs name; ``runtimes``: the
    ``numNodes`` of each ClusterTrainingRuntime a TrainJob refers to (None:
    absent or without one); ``nodes``: the nodes, read only when a job is
    topology-ordered (their labels give the topology paths), and Volcano's
    HyperNodes then too; ``claims``: the ResourceClaims, read only when a job
    takes its addresses from one (``ring-controller.io/network-claim``).
    """

    workloads: tuple[tuple[str, Json], ...]
    pods: tuple[Json, ...] = ()
    configmaps: Mapping[str, Json] = field(default_factory=dict)
    runtimes: Mapping[str, int | None] = field(default_factory=dict)
    events: tuple[Json, ...] = ()
    nodes: tuple[Json, ...] = ()
    hypernodes: tuple[Json, ...] = ()
    claims: tuple[Json, ...] = ()


@dataclass(frozen=True, slots=True)
class JobView:
    """One served job as the controller sees it now, with what its ConfigMap holds.

    ``written`` is the spec in the ConfigMap (None when there is none or it
    is unreadable, ``written_error`` then says why); ``explanation`` the
    decision on the live pods; ``blocker`` why the ConfigMap must not be
    written (foreign, another job's); ``spec_time`` when the ConfigMap was
    last written (RFC 3339, "" unknown); ``raw_pods`` the job's pods by name.
    """

    kind: WorkloadKind
    workload: WorkloadRecord
    raw_pods: Mapping[str, Json]
    configmap: ConfigMapRecord | None
    written: ClusterSpec | None
    written_error: str
    blocker: Problem | None
    explanation: Explanation
    spec_time: str
    rank_rule: RankRule = RULE_SPEC

    @property
    def status(self) -> ShownStatus:
        """See :data:`ShownStatus`."""
        if self.live == STATUS_INVALID:
            return STATUS_INVALID
        if self.configmap is None:
            return STATUS_ABSENT
        if self.written is None:
            return STATUS_UNREADABLE
        return self.written.status

    @property
    def live(self) -> JobStatus:
        """What the controller would write now: ``completed``, ``initializing`` or ``invalid``."""
        return STATUS_INVALID if self.blocker is not None else self.explanation.decision.status

    @property
    def behind(self) -> bool:
        """True when the ConfigMap does not hold what the controller would write now (it has not synced yet)."""
        if self.live == STATUS_INVALID:
            return False
        decided = self.explanation.decision.spec
        return self.written is None or (self.written.status, self.written.members) != (decided.status, decided.members)

    @property
    def problems(self) -> tuple[Problem, ...]:
        """The problems the controller reports for the job (as Warning Events)."""
        found = self.explanation.decision.problems
        return (self.blocker, *found) if self.blocker is not None else found

    @property
    def ready(self) -> int:
        """Members that count now."""
        return self.explanation.decision.ready


def kind_of(record: WorkloadRecord) -> WorkloadKind:
    """The watched kind a record was read as."""
    return next(k for k in KINDS if k.kind == record.kind and k.api_version == record.api_version)


def views(
    snapshot: Snapshot,
    *,
    label_key: str,
    default_port: int = DEFAULT_PORT,
    hccl_version: str = DEFAULT_CHOICE,
    order: RankOrder | None = None,
) -> list[JobView]:
    """One view per served job in ``snapshot``, sorted by namespace, kind and name.

    ``order``: the controller's ``--rank-order`` and ``--topology-keys`` (its
    ``node_path`` is replaced by the snapshot's nodes).
    """
    if order is not None:
        paths = {str((n.get("metadata") or {}).get("name", "")): node_path(n, order.keys) for n in snapshot.nodes}
        index = HyperNodeIndex(h for h in map(hypernode_record, snapshot.hypernodes) if h is not None)
        order = RankOrder(rule=order.rule, keys=order.keys, node_path=paths.get, hypernodes=index.path)
    by_short = {k.short: k for k in KINDS}
    records: dict[tuple[str, str], WorkloadRecord] = {}
    for short, raw in snapshot.workloads:
        kind = by_short[short]
        record = kind.record(raw, label_key=label_key)
        records[(short, object_key(record.namespace, record.name))] = record
    claims = {str(key_of(raw)): claim_record(raw) for raw in snapshot.claims}
    pods_by_job: dict[JobKey, list[tuple[PodRecord, Json]]] = {}
    for raw_pod in snapshot.pods:
        pod = pod_record(raw_pod, default_port=default_port)
        if pod.claims and claims:
            pod = with_claim_networks(pod, claims.get)
        for job in pod.job_keys:
            pods_by_job.setdefault(job, []).append((pod, raw_pod))
    out: list[JobView] = []
    for key in sorted({k for r in records.values() for k in r.job_keys}):
        workload = serving_workload(
            key,
            lookup=lambda kind, name: records.get((kind.short, name)),
            runtime_nodes=lambda name: snapshot.runtimes.get(name),
        )
        if workload is None or workload.key != key:
            continue
        members = [(as_group_member(p) if p.group == key else p, raw) for p, raw in pods_by_job.get(key, [])]
        out.append(
            job_view(
                workload,
                [p for p, _ in members],
                {p.name: raw for p, raw in members},
                snapshot.configmaps.get(object_key(workload.namespace, workload.configmap)),
                hccl_version=hccl_version,
                order=order,
            )
        )
    out.sort(key=lambda v: (v.workload.namespace, v.kind.short, v.workload.name, v.workload.group or 0))
    return out


def job_view(
    workload: WorkloadRecord,
    pods: list[PodRecord],
    raw_pods: Mapping[str, Json],
    raw_configmap: Json | None,
    *,
    hccl_version: str = DEFAULT_CHOICE,
    order: RankOrder | None = None,
) -> JobView:
    """The view of one served workload given its pods and its ConfigMap (None: absent)."""
    cm = configmap_record(raw_configmap) if raw_configmap is not None else None
    blocker = blocked(workload, cm)
    written: ClusterSpec | None = None
    error = ""
    if cm is not None and blocker is None:
        try:
            text = cm.files.get(CLUSTER_FILE)  # plain or compressed (ranktable.stored)
            if text is None:
                error = f"ConfigMap {cm.name} has no {CLUSTER_FILE}"
            else:
                written = spec_from_json(text)
        except SpecError as err:
            error = f"ConfigMap {cm.name}: {err}"
    explanation = explain(workload, pods, previous=written, hccl_version=hccl_version, order=order)
    rule, _ = rule_for(workload.rank_order, order.rule if order is not None else RULE_SPEC)
    return JobView(
        kind=kind_of(workload),
        workload=workload,
        raw_pods=dict(raw_pods),
        configmap=cm,
        written=written,
        written_error=error,
        blocker=blocker,
        explanation=explanation,
        spec_time=last_write(raw_configmap) if raw_configmap is not None else "",
        rank_rule=rule,
    )


def last_write(raw: Json) -> str:
    """When an object was last written: the newest ``managedFields`` time, else its creation time."""
    meta = raw.get("metadata") or {}
    times = [str(m.get("time")) for m in meta.get("managedFields") or [] if m.get("time")]
    return max(times) if times else str(meta.get("creationTimestamp") or "")


def parse_time(value: str) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it, None if empty or malformed."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def age(value: str, *, now: datetime | None = None) -> str:
    """kubectl's short age of a timestamp (``45s``, ``3m12s``, ``15m``, ``2h5m``, ``3d``), ``<unknown>`` if none."""
    when = parse_time(value)
    if when is None:
        return "<unknown>"
    seconds = max(0, int(((now or datetime.now(UTC)) - when).total_seconds()))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def find(found: Iterable[JobView], ref: str) -> list[JobView]:
    """The views ``ref`` names: ``NAME`` or ``KIND/NAME`` (a short name such as ``vcjob``, or the kind, any case;
    a short name wins over a kind or plural that matches too). A LeaderWorkerSet's NAME names all its groups,
    ``NAME-GROUP`` one."""
    kind, _, name = ref.rpartition("/")
    kind = kind.lower()
    named = [v for v in found if name in (v.workload.name, v.workload.job_name)]
    if not kind:
        return named
    # A short name is exact (``job`` is batch/v1's, ``vcjob`` Volcano's) before kinds and plurals, which two share.
    exact = [v for v in named if kind == v.kind.short]
    return exact or [v for v in named if kind in (v.kind.kind.lower(), v.kind.plural)]


# What ring-launch exports in a pod. ------------------------------------------------


@dataclass(frozen=True, slots=True)
class LaunchSetup:
    """How a pod's ``ring-launch`` is configured, read from its container spec.

    ``config_dir`` (``--config-dir``, ``$RING_CONFIG_DIR``, the default),
    ``hostfile_dir`` (``--hostfile-dir``, ``$RING_HOSTFILE_DIR``,
    ``$TMPDIR/ring-launch``), ``from_api`` and ``configmap`` (API mode's
    ConfigMap, None: the job's), ``rank_table_dir`` (``$RING_RANK_TABLE_DIR``,
    "" unset); ``notes`` say what could not be known for sure.
    """

    container: str
    config_dir: str
    hostfile_dir: str
    from_api: bool
    configmap: str | None
    notes: tuple[str, ...]
    rank_table_dir: str = ""


def launch_setup(pod: Json, *, container: str | None = None) -> LaunchSetup:
    """The launcher's options in ``pod``'s ``container`` (default: the one that runs ``ring-launch``, else the first).

    Raises ValueError when the pod has no such container.
    """
    containers = list((pod.get("spec") or {}).get("containers") or [])
    if not containers:
        raise ValueError("the pod has no containers")
    if container is not None:
        chosen = next((c for c in containers if c.get("name") == container), None)
        if chosen is None:
            names = ", ".join(str(c.get("name")) for c in containers)
            raise ValueError(f"the pod has no container {container!r} (it has: {names})")
    else:
        chosen = next((c for c in containers if _launcher_argv(c) is not None), containers[0])
    notes: list[str] = []
    env = {str(e.get("name")): str(e.get("value")) for e in chosen.get("env") or [] if "value" in e}
    argv = _launcher_argv(chosen)
    options = None
    if argv is None:
        notes.append(f"container {chosen.get('name')} does not run ring-launch in its command; defaults assumed")
    else:
        try:
            options = launch_options(argv)
        except ValueError as err:
            notes.append(f"its ring-launch command line is invalid ({err}); defaults assumed")
    config_dir = (options.config_dir if options else None) or env.get("RING_CONFIG_DIR") or DEFAULT_CONFIG_DIR
    hostfile_dir = (
        (options.hostfile_dir if options else None)
        or env.get("RING_HOSTFILE_DIR")
        or os.path.join(env.get("TMPDIR") or "/tmp", "ring-launch")
    )
    from_api = bool(options and options.from_api)
    configmap = ((options.configmap if options else None) or env.get("RING_CONFIGMAP")) if from_api else None
    if not from_api:
        mounts = {str(m.get("name")): str(m.get("mountPath")) for m in chosen.get("volumeMounts") or []}
        mounted = [mounts[n] for n in CONFIG_VOLUME_NAMES if n in mounts]
        if not mounted:
            notes.append(
                f"container {chosen.get('name')} mounts no {' or '.join(CONFIG_VOLUME_NAMES)} volume: "
                f"ring-launch would wait for {config_dir}/{CLUSTER_FILE} forever"
            )
        elif os.path.normpath(mounted[0]) != os.path.normpath(config_dir):
            notes.append(
                f"the spec volume is mounted at {mounted[0]} but ring-launch reads {config_dir}: it would wait forever"
            )
    return LaunchSetup(
        container=str(chosen.get("name")),
        config_dir=config_dir,
        hostfile_dir=hostfile_dir,
        from_api=from_api,
        configmap=configmap,
        notes=tuple(notes),
        rank_table_dir=env.get(RANK_TABLE_DIR_ENV, ""),
    )


#: What the launcher is called in a command: the console script, or the one file (``python3 /ring/ring-launch.pyz``).
_LAUNCHER_NAMES: Final = frozenset({"ring-launch", PYZ_NAME})


def _launcher_argv(container: Json) -> list[str] | None:
    """The arguments after ``ring-launch`` (or ``ring-launch.pyz``) in a container's command and args, None if none."""
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    for i, word in enumerate(words):
        if os.path.basename(word) in _LAUNCHER_NAMES:
            return words[i + 1 :]
        if "ring-launch" in word and " " in word:  # sh -c "ring-launch ... -- python train.py"
            try:
                split = shlex.split(word)
            except ValueError:
                continue
            for j, part in enumerate(split):
                if os.path.basename(part) in _LAUNCHER_NAMES:
                    return split[j + 1 :]
    return None


@dataclass(frozen=True, slots=True)
class PodEnv:
    """What ``ring-launch`` does in a pod now: ``env`` (what it exports), or ``waiting`` (why it still waits)."""

    setup: LaunchSetup
    env: dict[str, str] | None
    waiting: str
    ready: Ready | None


def pod_env(pod: Json, configmap: Json | None, *, where: str, container: str | None = None) -> PodEnv:
    """Judge the ConfigMap's files for ``pod`` as its ``ring-launch`` would, and derive its exports.

    ``configmap`` is the ConfigMap the launcher reads (None: absent),
    ``where`` its name for messages. Raises :class:`~ranktable.clusterspec.SpecError`
    for a malformed spec (``ring-launch`` exits 65) or for a pod the
    completed spec does not list (:class:`~ranktable.clusterspec.PodNotInSpec`, exit 3).
    """
    setup = launch_setup(pod, container=container)
    meta = pod.get("metadata") or {}
    identity = Identity(
        pod=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        ip=str((pod.get("status") or {}).get("podIP") or ""),
    )
    data = files_from_configmap(configmap)  # either form (ranktable.stored); SpecError when undecodable
    judge = Judge(identity=identity, where=where)
    verdict = judge.judge(Observation(cluster=data.get(CLUSTER_FILE), hccl=data.get(HCCL_FILE), final=True))
    if isinstance(verdict, str):
        if judge.not_in is not None:
            raise judge.not_in
        return PodEnv(setup=setup, env=None, waiting=verdict, ready=None)
    rank_table = None
    if verdict.hccl is not None:
        if setup.rank_table_dir:
            rank_table = os.path.join(setup.rank_table_dir, HCCL_FILE)
        elif setup.from_api or HCCL_FILE not in ((configmap or {}).get("data") or {}):  # API mode, compressed form
            rank_table = "<a local copy of hccl.json>"
        else:
            rank_table = os.path.join(setup.config_dir, HCCL_FILE)
    env = launch_env(verdict, rank_table_file=rank_table, hostfile_dir=setup.hostfile_dir)
    return PodEnv(setup=setup, env=env, waiting="", ready=verdict)
