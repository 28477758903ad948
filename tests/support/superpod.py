"""Super-pod scale Ascend jobs as plain data: the workload and its pods' device annotations.

Shared by the unit tests (records fed to ``decide``), the integration test
(objects created on the control plane, annotations patched in the way the
device plugin does) and the benchmark (``tests/bench/superpod.py``). Values are
shaped like the real device plugin's: the pod's uid as ``server_id``, the
node's IP as ``host_ip``, one device IP per NPU, A3 ``super_device_id`` s,
``super_pod_id`` as a JSON number, A5 ``levelList`` s with a unique EID per
device and port.

Shapes (``SHAPES``), each named ``<generation>-<servers>x<devices>``:

* ``a2``: Atlas A2 training servers, 8 NPUs, table 1.0 (``auto``), v1/v2 by flag;
* ``a3``: A3 super pods of 48 nodes x 16 dies (Volcano's Ascend plugin counts
  dies), node selector ``accelerator-type: module-a3-16-super-pod``, table 1.2;
* ``a5``: one A5 super pod (the ``huawei.com/npu`` resource), table 2.0.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from model.keys import DEVICE_ANNOTATION, NPU_DEVICE_ANNOTATION
from tests.support.factories import pod_template, volcano_job, volcano_pod

Json = dict[str, Any]

#: Nodes in one A3 super pod.
A3_NODES_PER_SUPER_POD = 48


@dataclass(frozen=True)
class Shape:
    """One job shape: ``servers`` pods of ``devices`` NPUs of ``generation``; ``version``
    is the table ``auto`` chooses for it."""

    generation: str
    servers: int
    devices: int

    @property
    def name(self) -> str:
        return f"{self.generation}-{self.servers}x{self.devices}"

    @property
    def npus(self) -> int:
        return self.servers * self.devices

    @property
    def version(self) -> str:
        return {"a2": "1.0", "a3": "1.2", "a5": "2.0"}[self.generation]

    @property
    def resource(self) -> str:
        return "huawei.com/npu" if self.generation == "a5" else "huawei.com/Ascend910"

    @property
    def annotation_key(self) -> str:
        return NPU_DEVICE_ANNOTATION if self.generation == "a5" else DEVICE_ANNOTATION


def shape(name: str) -> Shape:
    """The :class:`Shape` named ``a3-1024x16`` (generation, servers x devices)."""
    generation, size = name.split("-")
    servers, devices = size.split("x")
    return Shape(generation, int(servers), int(devices))


def pod_uid(job: str, i: int) -> str:
    """A stable uuid-shaped uid for pod ``i`` of ``job`` (unit tests; the cluster assigns real ones)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{job}/{i}"))


def node_ip(i: int) -> str:
    return f"10.{20 + i // 65536}.{i // 256 % 256}.{i % 256}"


def workload(s: Shape, *, name: str = "sp", namespace: str = "default", uid: str = "job-uid", **kw: Any) -> Json:
    """A Volcano Job of ``s.servers`` workers asking for ``s.devices`` NPUs each."""
    template = pod_template(runtime="ascend-910", **kw)
    container = template["spec"]["containers"][0]
    container["resources"] = {"limits": {s.resource: str(s.devices)}, "requests": {s.resource: str(s.devices)}}
    if s.generation == "a3":
        template["spec"]["nodeSelector"] = {"accelerator-type": "module-a3-16-super-pod"}
    return volcano_job(name, namespace=namespace, tasks=[("worker", s.servers)], uid=uid, template=template)


def _levels(i: int, d: int) -> list[Json]:
    """An A5 device's ``levelList``: UB on levels 0 and 1 (EIDs), UBOE on 2, RoCE on 3."""
    n = i * 64 + d
    rows = [
        (0, "UB", "EID", f"{n:016x}{0xA0 + d:016x}", "TOPO_FILE_DESC", "sp-0"),
        (1, "UB", "EID", f"{n:016x}{0xB0 + d:016x}", "TOPO_FILE_DESC", "sp-0"),
        (2, "UBOE", "IP", f"172.{16 + n // 65536}.{n // 256 % 256}.{n % 256}", "CLOS", "cluster-uboe"),
        (3, "ROCE", "IP", f"172.{64 + n // 65536}.{n // 256 % 256}.{n % 256}", "CLOS", "cluster-roce"),
    ]
    return [
        {
            "level": level,
            "info": {
                kind: {
                    "net_layer": level,
                    "net_instance_id": instance,
                    "net_type": net_type,
                    "net_attr": "",
                    "rank_addr_list": [{"addr_type": addr_type, "addr": addr, "ports": [f"0/{d}"], "plane_id": "0"}],
                }
            },
        }
        for level, kind, addr_type, addr, net_type, instance in rows
    ]


def device_annotation(s: Shape, i: int, *, pod: str, uid: str, host_ip: str) -> str:
    """The device plugin's annotation for server ``i`` (pod ``pod`` with ``uid``) of shape ``s``."""
    devices = []
    for d in range(s.devices):
        n = i * s.devices + d
        device: Json = {"device_id": str(d), "device_ip": f"192.{168 + n // 65536}.{n // 256 % 256}.{n % 256}"}
        if s.generation == "a3":
            # A3: a die's id within its super pod (the plugin's physical id scheme: 16 per node).
            device["super_device_id"] = str(37748736 + (i % A3_NODES_PER_SUPER_POD) * 16 + d)
        if s.generation == "a5":
            device["levelList"] = _levels(i, d)
        devices.append(device)
    value: Json = {
        "pod_name": pod,
        "server_id": uid,
        "host_ip": host_ip,
        "super_pod_id": i // A3_NODES_PER_SUPER_POD if s.generation == "a3" else 0,
        "rack_id": 0,
        "server_index": str(i),
        "server_ip": host_ip,
        "devices": devices,
    }
    return json.dumps(value, separators=(",", ":"))


def kwok_pod(s: Shape, job: Json, index: int) -> Json:
    """Pod ``index`` of ``job`` to create on the control plane: as Volcano makes it, with the device
    annotation from the start (``server_id`` a stable uuid: the real uid is the server's to give), and
    runnable on kwok's fake nodes, which have no NPUs and no A3 labels: the pod leaves out the NPU
    request and the node selector (the controller reads both from the Job's template)."""
    pod = volcano_pod(job, task="worker", index=index)
    pod["metadata"].pop("creationTimestamp", None)
    pod["metadata"]["annotations"][s.annotation_key] = device_annotation(
        s, index, pod=pod["metadata"]["name"], uid=pod_uid(job["metadata"]["name"], index), host_ip=node_ip(index)
    )
    spec = pod["spec"]
    spec.pop("nodeSelector", None)
    for container in spec["containers"]:
        container.pop("resources", None)
    return pod


def pods(s: Shape, job: Json) -> list[Json]:
    """Every worker pod of ``job`` Running with an IP and its device annotation (unit tests)."""
    name = job["metadata"]["name"]
    out = []
    for i in range(s.servers):
        uid = pod_uid(name, i)
        host = node_ip(i)
        pod = volcano_pod(
            job,
            task="worker",
            index=i,
            uid=uid,
            ip=f"127.1.{i // 250}.{i % 250 + 1}",
            host_ip=host,
            phase="Running",
            node=f"node-{i}",
        )
        pod["metadata"]["annotations"][s.annotation_key] = device_annotation(
            s, i, pod=pod["metadata"]["name"], uid=uid, host_ip=host
        )
        out.append(pod)
    return out
