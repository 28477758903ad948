"""Fake nodes for the local control plane: their layout and kwok's behaviour.

kwok plays the kubelet for Node objects carrying the label ``type=kwok``: it
keeps their leases fresh and walks their pods through "stages" (our own
stage set below, written for this harness). The layout is chosen so that test
processes on this machine can act as the pods' containers:

* node ``i`` is named ``kwok-node-<i>`` and owns pod CIDR ``127.1.<i>.0/24``;
  kwok hands each pod the next free address of its node's CIDR, so every pod
  IP is a loopback address a test process can bind to (Linux routes all of
  127.0.0.0/8 to ``lo``). kube-controller-manager does not allocate CIDRs
  (``--allocate-node-cidrs`` stays off): the harness sets them on create;
* node ``i``'s InternalIP (the pods' ``status.hostIP``) is ``127.2.0.<i+1>``,
  distinct per node, also loopback, never inside a pod CIDR.

Pods stay Running until deleted, whatever owns them (kwok's stock "fast" stages
complete pods owned by Jobs at once, which would end every training job before
the controller could see it). A test ends a pod's run explicitly with the
annotation :data:`EXIT_CODE_ANNOTATION`: ``"0"`` makes it Succeeded, any other
value Failed with that exit code.
"""

from __future__ import annotations

import ipaddress
from typing import Any

__all__ = [
    "EXIT_CODE_ANNOTATION",
    "HOST_IP_ANNOTATION",
    "MAX_NODES",
    "NODE_LABEL",
    "POD_NETWORK",
    "STAGES",
    "node_manifest",
    "node_name",
    "node_host_ip",
    "node_pod_cidr",
]

#: Nodes kwok manages carry this label (key=value), also its selector flag.
NODE_LABEL = ("type", "kwok")
#: Every pod IP lies in this network.
POD_NETWORK = ipaddress.ip_network("127.1.0.0/16")
#: Read by our node stage to set the node's InternalIP.
HOST_IP_ANNOTATION = "ring-devcluster/host-ip"
#: Set on a Running pod to end it: "0" -> Succeeded, anything else -> Failed.
EXIT_CODE_ANNOTATION = "ring-devcluster/exit-code"
#: One /24 per node inside POD_NETWORK, minus headroom for a fallback CIDR.
MAX_NODES = 250
#: Pods per node: a /24 has 254 usable addresses, and kwok's pool does not
#: stop at the CIDR's end, so the scheduler must never place more.
PODS_PER_NODE = 250


def _check_index(index: int) -> None:
    if not 0 <= index < MAX_NODES:
        raise ValueError(f"node index {index} out of range 0..{MAX_NODES - 1}")


def node_name(index: int) -> str:
    """Name of fake node ``index`` (0-based)."""
    _check_index(index)
    return f"kwok-node-{index}"


def node_pod_cidr(index: int) -> str:
    """Pod CIDR of fake node ``index``: ``127.1.<index>.0/24``."""
    _check_index(index)
    subnets = POD_NETWORK.subnets(new_prefix=24)
    return str(next(s for i, s in enumerate(subnets) if i == index))


def node_host_ip(index: int) -> str:
    """InternalIP of fake node ``index``: ``127.2.0.<index+1>``."""
    _check_index(index)
    return str(ipaddress.ip_address("127.2.0.1") + index)


def node_manifest(index: int) -> dict[str, Any]:
    """The Node object registered for fake node ``index``.

    Status cannot be set on create; kwok's node stage fills it in (conditions,
    addresses from :data:`HOST_IP_ANNOTATION`, capacity).
    """
    name = node_name(index)
    cidr = node_pod_cidr(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                NODE_LABEL[0]: NODE_LABEL[1],
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "ring-devcluster",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", HOST_IP_ANNOTATION: node_host_ip(index)},
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
    }


# kwok Stage objects (kwok.x-k8s.io/v1alpha1), in kwok's config-file format.
# Templates are Go text/template rendering YAML for the object's status;
# NodeConditions, PodIPsWith, NodeIPsWith, Now, Quote, YAML are kwok functions.
STAGES = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ring-node-ready
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      {{{{ range NodeConditions }}}}
      - lastHeartbeatTime: {{{{ $now | Quote }}}}
        lastTransitionTime: {{{{ $now | Quote }}}}
        message: {{{{ .message | Quote }}}}
        reason: {{{{ .reason | Quote }}}}
        status: {{{{ .status | Quote }}}}
        type: {{{{ .type | Quote }}}}
      {{{{ end }}}}
      addresses:
      - address: {{{{ or (index .metadata.annotations "{HOST_IP_ANNOTATION}") NodeIP | Quote }}}}
        type: InternalIP
      - address: {{{{ .metadata.name | Quote }}}}
        type: Hostname
      allocatable:
        cpu: "64"
        memory: 512Gi
        pods: "{PODS_PER_NODE}"
        ephemeral-storage: 1Ti
        nvidia.com/gpu: "8"
        huawei.com/Ascend910: "8"
      capacity:
        cpu: "64"
        memory: 512Gi
        pods: "{PODS_PER_NODE}"
        ephemeral-storage: 1Ti
        nvidia.com/gpu: "8"
        huawei.com/Ascend910: "8"
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{{{ printf "kwok-%s" Version | Quote }}}}
        kubeProxyVersion: {{{{ printf "kwok-%s" Version | Quote }}}}
        containerRuntimeVersion: {{{{ printf "kwok-%s" Version | Quote }}}}
        kernelVersion: {{{{ printf "kwok-%s" Version | Quote }}}}
        osImage: ring-devcluster
        machineID: ""
        systemUUID: ""
        bootID: ""
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ring-node-heartbeat
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['True']
  delay:
    durationMilliseconds: 300000
    jitterDurationMilliseconds: 330000
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      {{{{ range NodeConditions }}}}
      - lastHeartbeatTime: {{{{ $now | Quote }}}}
        lastTransitionTime: {{{{ $now | Quote }}}}
        message: {{{{ .message | Quote }}}}
        reason: {{{{ .reason | Quote }}}}
        status: {{{{ .status | Quote }}}}
        type: {{{{ .type | Quote }}}}
      {{{{ end }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ring-pod-running
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: [Pending]
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - {{lastTransitionTime: {{{{ $now | Quote }}}}, status: "True", type: Initialized}}
      - {{lastTransitionTime: {{{{ $now | Quote }}}}, status: "True", type: Ready}}
      - {{lastTransitionTime: {{{{ $now | Quote }}}}, status: "True", type: ContainersReady}}
      - {{lastTransitionTime: {{{{ $now | Quote }}}}, status: "True", type: PodScheduled}}
      {{{{ range .spec.readinessGates }}}}
      - {{lastTransitionTime: {{{{ $now | Quote }}}}, status: "True", type: {{{{ .conditionType | Quote }}}}}}
      {{{{ end }}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: true
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      initContainerStatuses:
      {{{{ range .spec.initContainers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: true
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{{{ $now | Quote }}}}
            finishedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      {{{{ with NodeIPsWith .spec.nodeName }}}}
      hostIP: {{{{ index . 0 | Quote }}}}
      hostIPs:
      {{{{ range . }}}}
      - ip: {{{{ . | Quote }}}}
      {{{{ end }}}}
      {{{{ end }}}}
      {{{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}}}
      podIP: {{{{ index . 0 | Quote }}}}
      podIPs:
      {{{{ range . }}}}
      - ip: {{{{ . | Quote }}}}
      {{{{ end }}}}
      {{{{ end }}}}
      phase: Running
      startTime: {{{{ $now | Quote }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ring-pod-exit
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: [Running]
    - key: '.metadata.annotations["{EXIT_CODE_ANNOTATION}"]'
      operator: Exists
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $code := index .metadata.annotations "{EXIT_CODE_ANNOTATION}" }}}}
      conditions:
      - {{lastTransitionTime: {{{{ $now | Quote }}}}, status: "False", type: Ready, reason: PodCompleted}}
      - {{lastTransitionTime: {{{{ $now | Quote }}}}, status: "False", type: ContainersReady, reason: PodCompleted}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: {{{{ $code }}}}
            reason: {{{{ if eq $code "0" }}}}Completed{{{{ else }}}}Error{{{{ end }}}}
            startedAt: {{{{ $now | Quote }}}}
            finishedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {{{{ if eq $code "0" }}}}Succeeded{{{{ else }}}}Failed{{{{ end }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ring-pod-delete
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
  next:
    delete: true
"""
