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
from importlib import resources
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


#: kwok Stage objects for our fake nodes, from ``kwok-stages.yaml`` with the
#: constants above filled in.
STAGES = (
    resources.files("ringdevcluster")
    .joinpath("kwok-stages.yaml")
    .read_text(encoding="utf-8")
    .replace("@PODS_PER_NODE@", str(PODS_PER_NODE))
    .replace("@EXIT_CODE_ANNOTATION@", EXIT_CODE_ANNOTATION)
    .replace("@HOST_IP_ANNOTATION@", HOST_IP_ANNOTATION)
)
