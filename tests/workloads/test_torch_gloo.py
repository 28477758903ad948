"""PyTorch on the real node with nothing but ring-launch: a gloo all-reduce across 3 pods (opt-in).

Run with ``build/test.sh --with torch`` (or ``RING_TEST_TORCH=1``): PyTorch's
wheels from PyPI bring CUDA libraries (2.8 GB of wheels), too much for every
CI run, so the test is deselected otherwise (:mod:`tests.support.torchimage`).

A Volcano Job of 3 workers labelled ``pytorch`` runs a stock PyTorch image
(no ring-controller); the init container brings ``ring-launch.pyz``, which
waits for the controller's spec and exports ``MASTER_ADDR``, ``MASTER_PORT``,
``RANK`` and ``WORLD_SIZE``: the script reads only those
(``init_process_group("gloo")`` with ``env://``), all-reduces its rank + 1
and prints the sum, which must be 1 + 2 + 3 on every pod.

Which family gloo used is read from the kernel, not inferred: before it
leaves the process group the script lists its own TCP sockets (the inodes
of ``/proc/self/fd`` found in its pod's ``/proc/net/tcp`` and ``tcp6``).
gloo's listening socket is bound to its device's address (the address it
tells its peers through the store), and each pair of ranks holds one
established connection, so every pod must hold a connection to each other
pod at that pod's address of the job's family, and nothing else.

Twice: a job without an IP-family annotation, listed at its primary pod IPs
(IPv4 on the default dual-stack dev cluster), with ``GLOO_SOCKET_IFNAME=eth0``
(gloo then binds the interface's first address, the IPv4 one); and a job
with ``ring-controller.io/ip-family: IPv6``, without ``GLOO_SOCKET_IFNAME``
(gloo then binds what the pod's host name resolves to first: glibc orders
the kubelet's ``/etc/hosts`` entries IPv6 first by its default precedence
table), whose exports must hold no IPv4 pod address at all.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from model.keys import IP_FAMILY_ANNOTATION
from ringdevcluster import Cluster, node
from tests.support import nodejobs, torchimage
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.torch]

WORKERS = 3
PORT = 29500
#: Prints one ``RESULT {json}`` line: rank, world, the sum, its environment and its own TCP sockets
#: (``[table, local, remote, state]`` as ``/proc/net/tcp{,6}`` write them), read before the group is left.
SCRIPT = """
import json, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
mine = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    if target.startswith("socket:["):
        mine.add(target[8:-1])
sockets = []
for table in ("tcp", "tcp6"):
    with open("/proc/net/" + table) as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if fields[9] in mine:
                sockets.append([table] + fields[1:4])
print("RESULT " + json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": value.item(),
      "env": dict(os.environ), "sockets": sockets}), flush=True)
dist.destroy_process_group()
"""
ESTABLISHED, LISTEN = "01", "0A"


def torch_job(name: str, image: str, *, family: str | None = None, gloo_ifname: str | None = "eth0") -> dict[str, Any]:
    """The Volcano Job; ``family`` goes to the IP-family annotation, ``gloo_ifname`` to ``GLOO_SOCKET_IFNAME``."""
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HOME", "value": "/tmp"},
    ]
    if gloo_ifname is not None:
        env.append({"name": "GLOO_SOCKET_IFNAME", "value": gloo_ifname})
    pod_spec = {
        **copy.deepcopy(node.pod_placement()),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        "initContainers": [
            {
                "name": "ring-launch",
                "image": nodejobs.CONTROLLER_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "/opt/ring-launch/ring-launch.pyz", "--install", "/ring"],
                "volumeMounts": [{"name": "ring-launch", "mountPath": "/ring"}],
            }
        ],
        "containers": [
            {
                "name": "pytorch",
                "image": image,
                "imagePullPolicy": "Never",
                "command": [*nodejobs.LAUNCH, "--timeout", "300", "--", "python3", "-c", SCRIPT],
                "env": env,
                "ports": [{"name": "tf-port", "containerPort": PORT}],
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                "volumeMounts": [
                    {"name": "ring-launch", "mountPath": "/ring", "readOnly": True},
                    {"name": "rings-config", "mountPath": "/etc/ring-config", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "ring-launch", "emptyDir": {}},
            {"name": "rings-config", "configMap": {"name": f"rings-config-{name}", "optional": True}},
        ],
    }
    metadata: dict[str, Any] = {"name": name, "labels": {"ring-controller.atlas": "pytorch"}}
    if family is not None:
        metadata["annotations"] = {IP_FAMILY_ANNOTATION: family}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "minAvailable": WORKERS,
            "schedulerName": "volcano",
            "queue": "default",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": WORKERS,
                    "template": {"metadata": {"labels": {"ring-controller.atlas": "pytorch"}}, "spec": pod_spec},
                }
            ],
        },
    }


class Socket(NamedTuple):
    """One TCP socket of a process, from a line of ``/proc/net/tcp`` or ``tcp6``."""

    table: str
    local: tuple[str, int]
    remote: tuple[str, int]
    state: str


def _address(field: str) -> tuple[str, int]:
    """``(ip, port)`` from ``/proc/net/tcp{,6}``'s ``HEXIP:HEXPORT`` (each 32-bit word of the IP in host order);
    an IPv4-mapped IPv6 address (a dual-stack socket's IPv4 peer) as its IPv4 address."""
    hexip, hexport = field.split(":")
    raw = bytes.fromhex(hexip)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(hexport, 16)


def _sockets(result: dict[str, Any]) -> list[Socket]:
    return [
        Socket(table, _address(local), _address(remote), state) for table, local, remote, state in result["sockets"]
    ]


@pytest.fixture(scope="module")
def torch_image(workloads: Cluster) -> str:
    nodejobs.ensure_image(nodejobs.CONTROLLER_IMAGE, "--controller")
    return torchimage.image(Path(workloads.state_dir) / "torch-image")


def _run(k8s: Any, namespace: str, job: dict[str, Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """Create ``job``, wait for its pods to end; the pods by name and each one's ``RESULT`` (all must succeed)."""
    name = job["metadata"]["name"]
    k8s.custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job)

    def finished() -> list[Any] | None:
        pods = k8s.core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={name}").items
        done = [p for p in pods if p.status.phase in ("Succeeded", "Failed")]
        return pods if len(pods) == WORKERS and len(done) == WORKERS else None

    pods = sorted(
        wait_for(finished, timeout=600, interval=1.0, what=f"the {WORKERS} PyTorch pods of {name} to finish"),
        key=lambda p: p.metadata.name,
    )
    results = []
    for pod in pods:
        log = k8s.core.read_namespaced_pod_log(pod.metadata.name, namespace, container="pytorch")
        assert pod.status.phase == "Succeeded", log[-3000:]
        (line,) = [x for x in log.splitlines() if x.startswith("RESULT ")]
        results.append(json.loads(line[len("RESULT ") :]))
    return pods, results


def _check_all_reduce(results: list[dict[str, Any]], *, ips: list[str]) -> None:
    """Rank ``r`` (the r-th pod by name) at ``ips[r]``: its exports, its sum, and gloo's sockets all at ``ips``."""
    assert [r["rank"] for r in results] == list(range(WORKERS))
    assert {r["world"] for r in results} == {WORKERS}
    assert {r["sum"] for r in results} == {float(sum(range(1, WORKERS + 1)))}
    for rank, result in enumerate(results):
        env = result["env"]
        # torch's env:// takes the bare address (no brackets) and the port apart.
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (ips[0], str(PORT))
        assert (env["RANK"], env["WORLD_SIZE"], env["RING_IP"]) == (str(rank), str(WORKERS), ips[rank])
        # NCCL (torch's GPU backend, not run here) is told an IPv6 job's family; gloo has no such variable.
        assert env.get("NCCL_SOCKET_FAMILY") == ("AF_INET6" if ":" in ips[0] else None)
        sockets = _sockets(result)
        # gloo's listener is bound to its device's address, the one its peers are told.
        assert ips[rank] in {s.local[0] for s in sockets if s.state == LISTEN}, sockets
        established = [s for s in sockets if s.state == ESTABLISHED]
        assert established, sockets
        assert {s.local[0] for s in established} == {ips[rank]}, established
        # Rank 0's store (and rank 0 itself, a client of its own store) and gloo's full mesh: one
        # connection for each pair of ranks.
        peers = {s.remote[0] for s in established}
        assert set(ips) - {ips[rank]} <= peers <= set(ips), established
        listening = sorted(f"{s.table} {s.local[0]}:{s.local[1]}" for s in sockets if s.state == LISTEN)
        print(
            f"rank {rank}: MASTER_ADDR={env['MASTER_ADDR']} MASTER_PORT={env['MASTER_PORT']}; listening: "
            f"{', '.join(listening)}; {len(established)} established, to {', '.join(sorted(peers))}"
        )


def _families(cluster: Cluster) -> tuple[int, ...]:
    return tuple(ipaddress.ip_network(c).version for c in node.addresses(cluster.ip_family).pod_cidrs)


def test_gloo_all_reduce_across_three_pods_from_ring_launch_alone(
    k8s: Any, namespace: str, workloads: Cluster, controller: ControllerProcess, torch_image: str
) -> None:
    pods, results = _run(k8s, namespace, torch_job("gloo", torch_image))
    primary = [p.status.pod_ip for p in pods]
    assert {ipaddress.ip_address(ip).version for ip in primary} == {_families(workloads)[0]}
    _check_all_reduce(results, ips=primary)


def test_gloo_all_reduce_over_ipv6_when_the_job_asks_for_ipv6(
    k8s: Any, namespace: str, workloads: Cluster, controller: ControllerProcess, torch_image: str
) -> None:
    assert 6 in _families(workloads), (
        f"the workloads cluster is {workloads.ip_family}, without IPv6: bring it down and up again "
        "(a new cluster is dual-stack) or set RING_DEVCLUSTER_IP_FAMILY=dual"
    )
    pods, results = _run(k8s, namespace, torch_job("gloo6", torch_image, family="IPv6", gloo_ifname=None))
    all_ips = [[entry.ip for entry in p.status.pod_ips] for p in pods]
    ipv6 = []
    for ips in all_ips:
        (v6,) = [ip for ip in ips if ":" in ip]
        assert ipaddress.ip_address(v6) in node.POD_CIDR6
        ipv6.append(v6)
    _check_all_reduce(results, ips=ipv6)
    ipv4 = {ip for ips in all_ips for ip in ips if ":" not in ip}
    assert len(ipv4) == (WORKERS if 4 in _families(workloads) else 0)
    for result in results:
        # Not one socket of the trainer at a pod's IPv4 address, whatever its state.
        assert not {a[0] for s in _sockets(result) for a in (s.local, s.remote)} & ipv4, result["sockets"]
        # No IPv4 pod address in anything the trainer was given, but the pod template's POD_IP (status.podIP).
        given = {k: v for k, v in result["env"].items() if k != "POD_IP"}
        assert not [(k, v) for k, v in given.items() if set(re.findall(r"[0-9.]+", v)) & ipv4]
