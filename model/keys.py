"""Every label, annotation, name and default the product reads or writes.

One place for each fact: the daemon, the models and the tests import these
names instead of spelling the strings again. Values that come from other
projects (HCCL-Controller, Volcano, JobSet, TFJob) are theirs and must match
them byte for byte.
"""

from __future__ import annotations

from typing import Final

from ranktable import clusterspec

# Selection ---------------------------------------------------------------

#: Label on workloads and pods that opts them in; its value names the runtime
#: (``tensorflow``, ``pytorch``, ``ascend-910``, ...). HCCL-Controller's key, so
#: existing HCCL YAML keeps working.
DEFAULT_LABEL_KEY: Final = "ring-controller.atlas"

#: Label values whose jobs carry Ascend devices even without an NPU request.
ASCEND_RUNTIMES: Final = frozenset({"ascend-910", "ascend-910b"})

# The ConfigMap -------------------------------------------------------------

#: Pod volume names whose ConfigMap receives the spec, first match wins.
CONFIG_VOLUME_NAMES: Final = ("rings-config", "ascend-910-config")
#: ConfigMap name when no pod template names one: ``rings-config-<job>``
#: (defined with the spec's other file and ConfigMap names, which the launcher
#: shares; re-exported here with the product's other names).
CONFIGMAP_PREFIX: Final = clusterspec.CONFIGMAP_PREFIX
#: Label the controller puts on ConfigMaps it owns; without it a ConfigMap is
#: foreign and never modified.
MANAGED_LABEL: Final = "ring-controller.io/managed"
MANAGED_VALUE: Final = "true"
#: Annotation on a managed ConfigMap naming its job key (``vcjob/ns/name``);
#: an annotation, not a label, because job names may exceed 63 characters.
JOB_ANNOTATION: Final = "ring-controller.io/job"
#: Kubernetes' limit on a ConfigMap: the values of ``data`` and ``binaryData``
#: together may hold 1 MiB (the API server's validation; metadata is not counted).
CONFIGMAP_DATA_LIMIT: Final = 1024 * 1024
#: ``--max-members``' default: the most members one job may ask for, above ascend-operator's
#: 20,000 replicas. A job asking for more is ``invalid`` (``TooManyMembers``) and nothing is written.
DEFAULT_MAX_MEMBERS: Final = 32_768
#: ``--touch-max-members``' default: the largest job whose member pods are touched (one pod write per
#: member per epoch). A touch helps only while it comes before the kubelet's own periodic sync (about a
#: minute): at the 28-37 touches per second measured on kwok (docs/performance.md) that is about 2,000
#: members. Above it the mounted spec arrives with that sync, and API mode (``ring-launch --from-api``)
#: is the fast delivery (docs/operating.md, "Where one controller stops").
DEFAULT_TOUCH_MAX_MEMBERS: Final = 2_000

#: Annotation the controller sets on each member pod to the epoch of the
#: completed spec it belongs to. Any change to a pod makes the kubelet sync it
#: at once, and that sync refreshes the pod's ConfigMap volumes: without it a
#: mounted ``cluster.json`` follows only at the next periodic sync (about a
#: minute). The only pod field the controller writes (``--touch-pods``).
EPOCH_ANNOTATION: Final = "ring-controller.io/epoch"

# Self-registration (opt-in) ---------------------------------------------------

#: Annotation a launcher sets on its own pod when it starts (see
#: :mod:`ranktable.registration`); defined beside the spec's names, which the
#: launcher shares.
REGISTERED_ANNOTATION: Final = clusterspec.REGISTERED_ANNOTATION
#: Workload annotation opting a job in (``"true"``) or out (``"false"``) of
#: counting registered members, whatever ``--self-registration`` says.
SELF_REGISTER_ANNOTATION: Final = "ring-controller.io/self-register"

#: Workload annotation choosing the job's rank order: ``spec`` (task order,
#: then index) or ``topology`` (the nodes' topology path, then spec order; see
#: :mod:`model.topology`). Absent: the controller's ``--rank-order``.
RANK_ORDER_ANNOTATION: Final = "ring-controller.io/rank-order"

#: Kueue's label naming the LocalQueue a job waits in: Kueue's webhook creates
#: such a job suspended (``spec.suspend``) and its scheduler resumes it on
#: admission, and suspends it again when it preempts it.
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"

# Addresses: IP family and secondary network (per job, opt-in) -----------------

#: Workload annotation choosing the IP family of a dual-stack job's addresses:
#: ``IPv4`` or ``IPv6`` (any case). Absent: each member's primary pod IP
#: (``status.podIP``), and the job waits if those are of both families.
IP_FAMILY_ANNOTATION: Final = "ring-controller.io/ip-family"
#: Workload annotation naming the network whose addresses the spec lists:
#: ``NAMESPACE/NAME`` (or ``NAME``, in the job's namespace) of a Multus
#: NetworkAttachmentDefinition. Absent: the pod network.
NETWORK_ANNOTATION: Final = "ring-controller.io/network"
#: Workload annotation naming the pod's resource claim (its ``spec.resourceClaims[].name``)
#: whose DRA-allocated NIC carries the job's traffic: each member's address and
#: interface come from that claim's ``status.devices[].networkData``
#: (``resource.k8s.io/v1``). Exclusive with :data:`NETWORK_ANNOTATION`.
NETWORK_CLAIM_ANNOTATION: Final = "ring-controller.io/network-claim"
#: Pod annotation in which Multus (any CNI meta-plugin following the Network
#: Plumbing Working Group's multi-network specification) lists the pod's
#: interfaces: JSON ``[{"name", "interface", "ips", "mac", "default", ...}]``.
NETWORK_STATUS_ANNOTATION: Final = "k8s.v1.cni.cncf.io/network-status"

# Member ports ---------------------------------------------------------------

#: Container port names, first found wins (ours, then TFJob's).
PORT_NAMES: Final = ("tf-port", "tfjob-port")
#: Pod annotation overriding the port.
PORT_ANNOTATION: Final = "ring-controller/port"
#: Container env overriding the port (the seed runtime's variable).
PORT_ENV: Final = "TF_WORKER_PORT"
DEFAULT_PORT: Final = 2222

# Member slots (processes per pod: MPI hostfile slots, torchrun's nproc) ----

#: Pod annotation giving the member's slots.
SLOTS_ANNOTATION: Final = "ring-controller/slots"
#: Container env giving the member's slots when the annotation is absent.
SLOTS_ENV: Final = "RING_SLOTS"

# Devices (Ascend device plugin, Volcano's Ascend plugin, ascend-operator) ---------

#: Annotation the Ascend device plugin writes on a pod once devices are bound.
DEVICE_ANNOTATION: Final = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
#: The same annotation for the ``huawei.com/npu`` resource (current plugins).
NPU_DEVICE_ANNOTATION: Final = "ascend.kubectl.kubernetes.io/ascend-npu-configuration"
#: Device annotation keys, first found wins (ascend-operator's order).
DEVICE_ANNOTATIONS: Final = (DEVICE_ANNOTATION, NPU_DEVICE_ANNOTATION)
#: Extended resources whose request means the pod needs a device annotation:
#: any name with this prefix (``huawei.com/Ascend910``, ...) and ``NPU_RESOURCE``.
NPU_RESOURCE_PREFIX: Final = "huawei.com/Ascend"
#: The newest generation's resource (Atlas 350/850/950); requesting it selects rank table 2.0.
NPU_RESOURCE: Final = "huawei.com/npu"
#: The resource whose request count gives the chips per pod (``sp-block`` from affinity config).
ASCEND910_RESOURCE: Final = "huawei.com/Ascend910"
#: Pod annotation of Volcano's Ascend plugin (and ascend-operator): the pod's rank among the NPU pods.
RANK_INDEX_ANNOTATION: Final = "hccl/rankIndex"
#: Pod annotation naming the product model, ``hardware_type`` in table 1.0.
HARDWARE_TYPE_ANNOTATION: Final = "mind-cluster/hardware-type"
#: Pod annotation of the soft super-pod strategy: the pod's super pod.
SUPER_POD_RANK_ANNOTATION: Final = "super-pod-rank"
#: Workload label choosing the soft super-pod strategy (value ``soft``).
SUPER_POD_AFFINITY_LABEL: Final = "super-pod-affinity"
SUPER_POD_AFFINITY_SOFT: Final = "soft"
#: Workload annotation: the scheduling policy of Volcano's Ascend plugin.
SCHEDULE_POLICY_ANNOTATION: Final = "huawei.com/schedule_policy"
#: Policies that place a job into A3 super pods (table 1.2).
SUPER_POD_POLICIES: Final = ("chip2-node16-sp", "chip2-node8-sp")
#: The multi-level policy: table 1.2 unless the job is a 2.0 one.
MULTILEVEL_POLICY: Final = "multilevel"
#: Workload annotation: chips per logical super pod.
SP_BLOCK_ANNOTATION: Final = "sp-block"
#: Workload annotation ``level1=N,...``: N nodes per logical super pod (multilevel jobs).
AFFINITY_CONFIG_ANNOTATION: Final = "huawei.com/affinity-config"
#: Pod template node selector naming the accelerator type, and its super-pod values.
ACCELERATOR_TYPE_SELECTOR: Final = "accelerator-type"
SUPER_POD_ACCELERATORS: Final = ("module-a3-16-super-pod", "module-a3-8-super-pod")
#: Workload label choosing the scale-out network of table 2.0 (``ROCE`` or ``UBOE``).
SCALE_OUT_TYPE_LABEL: Final = "scaleout-type"

# Volcano --------------------------------------------------------------------

VOLCANO_GROUP: Final = "batch.volcano.sh"
VOLCANO_VERSION: Final = "v1alpha1"
VOLCANO_JOB_NAME: Final = "volcano.sh/job-name"
VOLCANO_TASK_SPEC: Final = "volcano.sh/task-spec"
VOLCANO_TASK_INDEX: Final = "volcano.sh/task-index"
VOLCANO_JOB_VERSION: Final = "volcano.sh/job-version"

# JobSet and Kubeflow Trainer -----------------------------------------------

JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_VERSION: Final = "v1alpha2"
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID: Final = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
JOBSET_RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"
JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_VERSION: Final = "v1alpha1"
#: The replicated job of a TrainJob's JobSet that runs the training nodes.
TRAINER_NODE_JOB: Final = "node"

# Deployments -------------------------------------------------------------------

POD_TEMPLATE_HASH: Final = "pod-template-hash"

# Indexed Jobs (batch/v1) -----------------------------------------------------

#: The Job controller's labels on its pods (the legacy ``job-name`` and
#: ``controller-uid`` too, on every release the tests run).
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
JOB_NAME_LEGACY_LABEL: Final = "job-name"
JOB_CONTROLLER_UID: Final = "batch.kubernetes.io/controller-uid"
#: ``spec.completionMode`` of a Job whose pods carry a completion index.
JOB_INDEXED: Final = "Indexed"

# StatefulSets ------------------------------------------------------------------

#: The StatefulSet controller's label with the pod's ordinal (Kubernetes 1.28+,
#: feature gate PodIndexLabel, on by default; GA in 1.32).
STATEFULSET_POD_INDEX: Final = "apps.kubernetes.io/pod-index"

# LeaderWorkerSets ----------------------------------------------------------------

LWS_GROUP: Final = "leaderworkerset.x-k8s.io"
LWS_VERSION: Final = "v1"
#: LWS's labels on every pod of a group: the set, the group, the pod's place
#: in it (the leader is worker 0, its workers 1..size-1).
LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"

# PodGroups (scheduling.k8s.io/v1beta1, Kubernetes 1.37) ----------------------

PODGROUP_GROUP: Final = "scheduling.k8s.io"
PODGROUP_VERSION: Final = "v1beta1"
#: A member's rank in its PodGroup where no known owner kind gives it an index:
#: a decimal integer from 0 to the group's ``minCount - 1``.
RANK_ANNOTATION: Final = "ring-controller.io/rank"
