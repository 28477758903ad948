"""Slim records: the few fields of workloads and pods the product reads.

The informers keep thousands of pods in memory, so they never store the API's
JSON: each object is reduced to one of these frozen, slotted records as it
arrives (see :mod:`model.pod` and the per-kind modules). Everything downstream
(the agent's decision, the spec) is computed from records only.

Identifiers that must not be mixed get their own ``NewType``: a job key is not
a pod key, a workload uid is not a pod uid.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NewType

from model.ascend import AscendJob, ascend_job
from model.keys import CONFIGMAP_PREFIX, KUEUE_QUEUE_LABEL, RANK_ORDER_ANNOTATION, SELF_REGISTER_ANNOTATION
from model.network import AddressRule, Attachment, address_rule
from ranktable.clusterspec import JobRef
from ranktable.stored import unpack

#: ``<kind-short>/<namespace>/<name>``, e.g. ``vcjob/default/mnist``: the unit
#: of work, one queue key and one agent worker per job.
JobKey = NewType("JobKey", str)
#: ``<namespace>/<name>`` (``<name>`` for a cluster-scoped object): the store
#: key of an object in the informers' caches, client-go's ``MetaNamespaceKeyFunc``.
ObjectKey = NewType("ObjectKey", str)
JobUID = NewType("JobUID", str)
PodUID = NewType("PodUID", str)


def job_key(short: str, namespace: str, name: str) -> JobKey:
    """The job key of workload ``namespace/name`` of the kind named ``short``."""
    return JobKey(f"{short}/{namespace}/{name}")


def group_key(key: JobKey, group: int) -> JobKey:
    """The job key of group ``group`` of the workload whose own job key is ``key``: ``<key>-<group>``."""
    return JobKey(f"{key}-{group}")


def split_group(key: str) -> tuple[str, int] | None:
    """``(key of the workload, group)`` of a :func:`group_key`, None if ``key`` does not end in ``-<number>``."""
    base, dash, group = key.rpartition("-")
    return (base, int(group)) if dash and group.isascii() and group.isdigit() else None


def object_key(namespace: str | None, name: str) -> ObjectKey:
    """The store key of object ``name`` in ``namespace`` (None or "": cluster-scoped)."""
    return ObjectKey(f"{namespace}/{name}" if namespace else name)


def key_of(raw: dict[str, Any]) -> ObjectKey:
    """The store key of a raw object, from its metadata (:func:`object_key`)."""
    meta = raw.get("metadata") or {}
    return object_key(meta.get("namespace"), str(meta.get("name") or ""))


def count(value: object, *, default: int) -> int | None:
    """A replica count: ``default`` when absent (None), None when not a non-negative int."""
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def runtime_of(raw: dict[str, Any], label_key: str) -> str:
    """The selection label's value on a workload (its runtime), "" if absent."""
    return str(((raw.get("metadata") or {}).get("labels") or {}).get(label_key, ""))


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One group of identical members in a workload, in spec order.

    ``replicas`` members get indices ``0..replicas-1``. Kinds that run a task
    as several Jobs (JobSet) number a pod ``job_index * per_job + index``,
    ``per_job`` being the pods per Job (its parallelism). ``configmap`` is the
    ConfigMap the task's pod template mounts as the rings-config volume, if it
    mounts one; ``wants_devices`` says its pods must carry a device annotation
    before they count. The Ascend facts of its pod template (inputs of the
    rank table version, see :mod:`model.ascend`): ``npu`` a container asks
    for ``huawei.com/npu``; ``super_pod_selector`` its node selector names an
    A3 super-pod accelerator type; ``chips`` the ``huawei.com/Ascend910``
    count a container requests. ``first_index`` is the index of the task's
    first pod where the kind does not number from 0 (a StatefulSet's
    ``spec.ordinals.start``): the pod with index ``first_index + i`` fills
    slot ``i``.
    """

    name: str
    replicas: int
    configmap: str | None = None
    wants_devices: bool = False
    per_job: int = 1
    npu: bool = False
    super_pod_selector: bool = False
    chips: int = 0
    first_index: int = 0


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """A selected workload, reduced to what describes its membership.

    ``version`` is the generation of members that counts: Volcano's
    ``status.version``, JobSet's restart attempt, 0 where the kind has none.
    ``runtime`` is the selection label's value. ``indexed`` is False for kinds
    whose pods carry no index (Deployments): the agent then ranks pods by a
    stable order of their own instead of by index. ``error`` says why the
    workload's spec is unusable (reported on the workload, never completed).
    ``runtime_ref`` names the ClusterTrainingRuntime whose ``numNodes`` fills
    in the member count when the workload (a TrainJob) does not give one.
    ``owns_pods`` False: pods name an intermediate owner (a TrainJob's
    JobSet), so their owner uid is not compared with ``uid``. ``served``
    False: the workload is run for another one (a TrainJob's JobSet) and only
    lends it its version. ``ascend`` holds what its rank table depends on.
    ``rank_order`` is its :data:`~model.keys.RANK_ORDER_ANNOTATION` (None:
    absent), checked where it is applied (:func:`model.topology.rule_for`).
    ``waiting`` says why the workload runs fewer than its members now, by its
    own choice (a suspended Job; an index that failed for good), None if it
    does not: shown to people, no Problem. ``index_source`` names where its
    pods' index comes from (a label), for the message about a pod without one.
    """

    key: JobKey
    kind: str
    api_version: str
    namespace: str
    name: str
    uid: JobUID
    version: int
    runtime: str
    tasks: tuple[TaskSpec, ...]
    indexed: bool = True
    error: str | None = None
    runtime_ref: str | None = None
    owns_pods: bool = True
    served: bool = True
    ascend: AscendJob = AscendJob()
    #: The job's own choice on self-registration (annotation
    #: :data:`model.keys.SELF_REGISTER_ANNOTATION`), None: the controller's flag decides.
    self_register: bool | None = None
    rank_order: str | None = None
    waiting: str | None = None
    index_source: str = ""
    #: A kind whose one object runs several independent jobs (a
    #: LeaderWorkerSet's groups): how many, 0 for a kind that is one job.
    #: The jobs are served as :meth:`for_group` records under :meth:`job_keys`.
    groups: int = 0
    #: The group this record serves (None: a record of the object itself).
    group: int | None = None
    #: Which address of each member the spec lists (its annotations
    #: :data:`~model.keys.IP_FAMILY_ANNOTATION` and :data:`~model.keys.NETWORK_ANNOTATION`,
    #: see :mod:`model.network`); ``address_error`` says why one is malformed (the job is then invalid).
    address: AddressRule = AddressRule()
    address_error: str | None = None
    #: A live pod whose index is outside the task's range is bad input, reported
    #: (``index_out_of_range``), rather than a pod left over from a scale down
    #: (a PodGroup's ranks are written by people).
    strict_range: bool = False
    #: The PodGroup its pod template names (``spec.schedulingGroup``), None if none: while that
    #: PodGroup is a job (labelled), the pods are served through it, not by this workload.
    in_group: JobKey | None = None

    @property
    def job_name(self) -> str:
        """The job's name for people: the workload's, ``<name>-<group>`` for a group."""
        return self.name if self.group is None else f"{self.name}-{self.group}"

    @property
    def job_keys(self) -> tuple[JobKey, ...]:
        """The job keys the workload is served under: its own, or one per group."""
        if not self.groups:
            return (self.key,)
        return tuple(group_key(self.key, g) for g in range(self.groups))

    def for_group(self, group: int) -> WorkloadRecord:
        """The record of group ``group`` (its own job key and ConfigMap; ``0 <= group < groups``)."""
        return replace(self, key=group_key(self.key, group), group=group, groups=0)

    @property
    def expected(self) -> int:
        """Members the spec needs before it is complete."""
        return sum(t.replicas for t in self.tasks)

    @property
    def configmap(self) -> str:
        """The ConfigMap the spec goes to (first task naming one, else the default)."""
        for task in self.tasks:
            if task.configmap:
                return task.configmap
        return CONFIGMAP_PREFIX + self.name + (f"-{self.group}" if self.group is not None else "")

    @property
    def wants_devices(self) -> bool:
        """True when any member must report devices (an NPU job)."""
        return any(t.wants_devices for t in self.tasks)

    def ref(self) -> JobRef:
        """The ``job`` object of the spec."""
        return JobRef(
            kind=self.kind,
            api_version=self.api_version,
            namespace=self.namespace,
            name=self.name,
            uid=self.uid,
            version=self.version,
        )

    def owner_reference(self) -> dict[str, object]:
        """An ownerReference to this workload, so its ConfigMap dies with it."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A selected pod, reduced to its identity in a job and its address.

    ``job`` is None when the pod names no workload the models know (it is
    then ignored). ``index`` is None for pods without one (Deployments).
    ``version`` is None when the pod carries no version (it then matches any).
    ``job_index`` is the pod's Job within its task (JobSet), else 0.
    ``devices`` is the raw device annotation, parsed by the agent so that a
    bad one can be reported on the workload. ``slots`` is the member's process
    count (:func:`model.template.member_slots`); ``port_error`` and
    ``slots_error`` say why a malformed rule keeps the pod from counting.
    ``rank_index``, ``hardware`` and ``super_pod_rank`` are the raw Ascend
    annotations (None when absent), see :mod:`model.ascend`. ``mounts`` names
    the ConfigMaps the pod's volumes project (``configMap`` volumes and
    ``projected`` sources), sorted: only a pod that mounts its spec gains from
    the controller's touch.
    """

    namespace: str
    name: str
    uid: PodUID
    job: JobKey | None
    owner_uid: str | None
    task: str
    index: int | None
    version: int | None
    job_index: int
    phase: str
    ip: str
    host_ip: str
    node: str
    port: int
    created: str
    deleting: bool
    devices: str | None
    wants_devices: bool
    port_error: str | None = None
    #: The pod's :data:`model.keys.EPOCH_ANNOTATION` value ("" when absent).
    epoch_seen: str = ""
    slots: int = 1
    slots_error: str | None = None
    rank_index: str | None = None
    hardware: str | None = None
    super_pod_rank: str | None = None
    #: The IP its launcher registered (:data:`model.keys.REGISTERED_ANNOTATION`), "" when none.
    registered_ip: str = ""
    #: Why the registration annotation is malformed (None: absent or valid).
    registration_error: str | None = None
    mounts: tuple[str, ...] = ()
    #: The pod's IPs of ``status.podIPs`` other than ``ip`` (the other family on dual-stack), else empty.
    other_ips: tuple[str, ...] = ()
    #: ``spec.hostNetwork``: the pod shares its node's IPs.
    host_network: bool = False
    #: The member's port is a container port of a hostNetwork pod, i.e. a
    #: ``hostPort`` bound as written (:func:`model.network.host_port`): it cannot be moved.
    host_port: bool = False
    #: The raw :data:`~model.keys.NETWORK_STATUS_ANNOTATION` (None: absent), parsed where a job asks for a network.
    network_status: str | None = None
    #: The other IPs its launcher registered (``status.podIPs`` as the downward API gave them), beside ``registered_ip``.
    registered_other_ips: tuple[str, ...] = ()
    #: The pod's resource claims as (reference name, ResourceClaim name), sorted (:func:`model.network.pod_claims`).
    claims: tuple[tuple[str, str], ...] = ()
    #: What those claims' statuses report (by reference name: their NICs, or why malformed),
    #: filled in from the ResourceClaim cache where a job asks for a claim's NIC; empty otherwise.
    claim_networks: tuple[tuple[str, tuple[Attachment, ...] | str], ...] = ()
    #: The job key of the PodGroup the pod names (``spec.schedulingGroup``), None if none: its
    #: second job, beside ``job`` (see :mod:`model.podgroup`); ``group_index`` its rank there.
    group: JobKey | None = None
    group_index: int | None = None

    @property
    def job_keys(self) -> tuple[JobKey, ...]:
        """Every job the pod may be a member of: its workload's, then its PodGroup's."""
        if self.group is None:
            return (self.job,) if self.job is not None else ()
        return (self.job, self.group) if self.job is not None else (self.group,)

    @property
    def ips(self) -> tuple[str, ...]:
        """Every IP of the pod, primary first: the status's, else the registered ones (empty: none known)."""
        if self.ip:
            return (self.ip, *self.other_ips)
        if self.registered_ip:
            return (self.registered_ip, *self.registered_other_ips)
        return ()

    @property
    def key(self) -> ObjectKey:
        """The pod's store key."""
        return object_key(self.namespace, self.name)

    @property
    def ready(self) -> bool:
        """Running with an IP and not being deleted: the member may count."""
        return self.phase == "Running" and bool(self.ip) and not self.deleting

    @property
    def registered(self) -> bool:
        """Its launcher said it runs, before (or without) the kubelet's Running status.

        Not deleted or finished, scheduled with the node's address known, and
        the registered IP is the pod's IP wherever the status already has one.
        Counts only for jobs opted into self-registration.
        """
        return (
            bool(self.registered_ip)
            and not self.deleting
            and self.phase in ("Pending", "Running")
            and bool(self.host_ip)
            and (not self.ip or self.ip == self.registered_ip)
        )

    @property
    def address(self) -> str:
        """The member's IP: the status's, else the registered one."""
        return self.ip or self.registered_ip


@dataclass(frozen=True, slots=True)
class ConfigMapRecord:
    """A ConfigMap carrying the controller's label: where a spec was written.

    ``data`` holds its plain keys as written, ``binary_data`` its
    ``binaryData`` (decoded from base64; the spec's compressed form, see
    :mod:`ranktable.stored`). :attr:`files` gives the spec files whichever
    form was written; the agent compares against them to skip writes that
    would change nothing, and reads its epoch after a restart.
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    managed: bool
    job: JobKey | None
    data: dict[str, str]
    binary_data: dict[str, bytes] = field(default_factory=dict)

    @property
    def files(self) -> dict[str, str]:
        """The spec files by name, decompressed when stored compressed; raises SpecError when unreadable."""
        return unpack(self.data, self.binary_data)

    @property
    def key(self) -> ObjectKey:
        """The ConfigMap's store key."""
        return object_key(self.namespace, self.name)


def self_register_choice(annotations: dict[str, Any]) -> bool | None:
    """The workload's self-registration choice: ``"true"`` or ``"false"`` (any case), else None (the flag's)."""
    value = str(annotations.get(SELF_REGISTER_ANNOTATION, "")).strip().lower()
    return {"true": True, "false": False}.get(value)


def suspension(raw: dict[str, Any], kind: str) -> str | None:
    """Why workload ``raw`` of ``kind`` runs no pods by its own choice: it is suspended
    (``spec.suspend``), by Kueue when it names a LocalQueue; None when it is not suspended."""
    if ((raw.get("spec") or {}).get("suspend")) is not True:
        return None
    queue = ((raw.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL)
    if queue:
        return (
            f"the {kind} is suspended (spec.suspend) until Kueue admits it from LocalQueue {queue} "
            f"(label {KUEUE_QUEUE_LABEL}), or after Kueue preempted it: its pods run once it is resumed"
        )
    return f"the {kind} is suspended (spec.suspend): its pods run once it is resumed"


def workload(raw: dict[str, Any], *, short: str, kind: str, api_version: str, **fields: Any) -> WorkloadRecord:
    """A WorkloadRecord for ``raw`` of ``kind``: identity from its metadata
    (job key ``<short>/<namespace>/<name>``), its Ascend facts from the
    metadata and ``fields["tasks"]``, why it waits (:func:`suspension`)
    unless ``fields`` says, the rest from ``fields``."""
    meta = raw.get("metadata") or {}
    fields.setdefault("waiting", suspension(raw, kind))
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    fields.setdefault("ascend", ascend_job(meta, fields.get("tasks", ())))
    fields.setdefault("self_register", self_register_choice(meta.get("annotations") or {}))
    annotations = meta.get("annotations") or {}
    if RANK_ORDER_ANNOTATION in annotations:
        fields.setdefault("rank_order", str(annotations[RANK_ORDER_ANNOTATION]))
    rule, rule_error = address_rule(annotations, namespace=namespace)
    fields.setdefault("address", rule)
    fields.setdefault("address_error", rule_error)
    return WorkloadRecord(
        key=job_key(short, namespace, name),
        kind=kind,
        api_version=api_version,
        namespace=namespace,
        name=name,
        uid=JobUID(str(meta.get("uid", ""))),
        **fields,
    )
