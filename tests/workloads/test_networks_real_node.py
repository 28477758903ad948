"""hostNetwork members on the real node: two TensorFlow workers of one job share the node's IP and train.

The Volcano example (build/examples/volcano) with ``hostNetwork: true`` and
its member port given by the ``ring-controller/port`` annotation instead of a
container port (which would be a hostPort, one per node): the real Volcano
controller makes both pods, the real kubelet runs both on the one node, in
the node's network namespace. ring-controller lists them at the node's IP
with ports 23222 and 23223 (the template's port plus each member's place on
the IP), ring-launch exports that TF_CONFIG, and the workers must train in
sync (identical weights), each gRPC server on its own port of the host.

IPv6 and dual-stack pods on the real node: the dev cluster is dual-stack by
default (IPv4 first, ``ring-devcluster up --ip-family``), so every pod there
has an IPv4 and an IPv6 address (``status.podIPs``). A Volcano job with
``ring-controller.io/ip-family: IPv6`` lists its workers at their IPv6 pod
IPs; ring-launch exports them bracketed where a port follows (``TF_CONFIG``,
the JAX coordinator, the MPICH hostfile) and bare beside a port variable
(torch), and the TensorFlow workers train over IPv6 (no IPv4 address is in
anything they are given). A job without the annotation lists every worker at
its primary IP, IPv4 here: the documented default, one family for all.
On an IPv6-only cluster (``RING_DEVCLUSTER_IP_FAMILY=ipv6``) the primary IPs
are IPv6 and both tests expect that.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from model.keys import IP_FAMILY_ANNOTATION
from ringdevcluster import Cluster, node
from tests.support import nodejobs
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import wait_for, wait_spec
from tests.workloads.test_tf_real_node import VOLCANO, _finished, _volcano_pods, volcano_job

pytestmark = pytest.mark.e2e

PORT = 23222


@pytest.fixture(scope="module")
def trainer_image() -> str:
    nodejobs.ensure_trainer_images()
    return nodejobs.TRAINER_IMAGE


@pytest.fixture(scope="module")
def cifar(workloads: Any) -> Path:
    return nodejobs.make_data(Path(workloads.state_dir) / "test-cifar10")


def test_two_host_network_workers_on_one_node_train_on_distinct_ports(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path
) -> None:
    job = volcano_job(
        "tfhost", data=cifar, workers=2,
        command=[*nodejobs.LAUNCH, "--timeout", "300", "--"], args=["python", "/app/train.py", "--steps", "4", "--result", "-"],
    )  # fmt: skip
    (task,) = job["spec"]["tasks"]
    template = task["template"]
    template["spec"]["hostNetwork"] = True
    template["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    (container,) = template["spec"]["containers"]
    container.pop("ports")
    template.setdefault("metadata", {}).setdefault("annotations", {})["ring-controller/port"] = str(PORT)
    k8s.custom.create_namespaced_custom_object(*VOLCANO, namespace, "jobs", job)
    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 else None)(_volcano_pods(k8s, namespace, "tfhost")),
        timeout=120,
        what="2 Volcano pods",
    )
    # The completed spec, read while the workers train (Volcano's end of the job is a new version).
    spec = wait_spec(k8s, namespace, "rings-config-tfhost", timeout=180)
    pods = _finished(k8s, namespace, pods)
    (ip,) = {p.status.pod_ip for p in pods}  # both on the node's IP
    assert ip == pods[0].status.host_ip
    assert [(m["pod"], m["ip"], m["port"]) for m in spec["members"]] == [
        ("tfhost-worker-0", ip, PORT),
        ("tfhost-worker-1", ip, PORT + 1),
    ]
    logs = [
        nodejobs.parse_log(p.metadata.name, k8s.core.read_namespaced_pod_log(p.metadata.name, namespace)) for p in pods
    ]
    results = [w.result for w in logs]
    assert all(results), [w.text[-1500:] for w in logs if not w.result]
    assert len({r["weights_sha256"] for r in results}) == 1, "workers ended with different weights"
    for r in results:
        assert r["tf_config"]["cluster"]["worker"] == [_host_port(ip, PORT), _host_port(ip, PORT + 1)]


#: Run by ring-launch before the trainer: prints what the launcher exported
#: (environment and the MPI hostfiles it wrote) as one ``EXPORTED {json}`` line.
SHOW_EXPORTS = (
    "import json, os; env = dict(os.environ); "
    "files = {k: open(env[k]).read() for k in ('OMPI_MCA_orte_default_hostfile', 'HYDRA_HOST_FILE') if k in env}; "
    "print('EXPORTED ' + json.dumps({'env': env, 'files': files}), flush=True)"
)


def _exported(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.startswith("EXPORTED ")]
    assert len(lines) == 1, text[-2000:]
    return json.loads(lines[0][len("EXPORTED ") :])  # type: ignore[no-any-return]


def _pod_ips(pod: Any) -> list[str]:
    return [entry.ip for entry in pod.status.pod_ips or []]


def _host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _check_exports(exported: dict[str, Any], *, ips: list[str], port: int, rank: int) -> None:
    """What ring-launch exported to member ``rank`` of a job whose members are at ``ips`` (rank order), one port."""
    env, files = exported["env"], exported["files"]
    ipv6 = ":" in ips[0]
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == [_host_port(ip, port) for ip in ips]
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (ips[0], str(port))  # bare address, own port variable
    assert env["JAX_COORDINATOR_ADDRESS"] == _host_port(ips[0], port)
    assert (env["RING_IP"], env["RING_PORT"]) == (ips[rank], str(port))
    assert files["OMPI_MCA_orte_default_hostfile"] == "".join(f"{ip} slots=1\n" for ip in ips)
    assert files["HYDRA_HOST_FILE"] == "".join(f"{_host_port(ip, 1)}\n" for ip in ips)
    # HCCL and NCCL default to IPv4: told AF_INET6 for an IPv6 member, nothing for an IPv4 pod-network member.
    assert env.get("HCCL_SOCKET_FAMILY") == ("AF_INET6" if ipv6 else None)
    assert env.get("NCCL_SOCKET_FAMILY") == ("AF_INET6" if ipv6 else None)


def _families(cluster: Cluster) -> tuple[int, ...]:
    return tuple(ipaddress.ip_network(c).version for c in node.addresses(cluster.ip_family).pod_cidrs)


def test_tf_workers_train_over_their_ipv6_pod_ips_when_the_job_asks_for_ipv6(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path, workloads: Cluster
) -> None:
    assert 6 in _families(workloads), (
        f"the workloads cluster is {workloads.ip_family}, without IPv6: bring it down and up again "
        "(a new cluster is dual-stack) or set RING_DEVCLUSTER_IP_FAMILY=dual"
    )
    train = ["python", "/app/train.py", "--steps", "4", "--result", "-"]
    job = volcano_job(
        "tf6", data=cifar, workers=2,
        command=[*nodejobs.LAUNCH, "--timeout", "300", "--", "sh", "-c", f"python3 -c {shlex.quote(SHOW_EXPORTS)} && exec \"$@\"", "sh"],
        args=train,
    )  # fmt: skip
    job["metadata"].setdefault("annotations", {})[IP_FAMILY_ANNOTATION] = "IPv6"
    k8s.custom.create_namespaced_custom_object(*VOLCANO, namespace, "jobs", job)
    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 else None)(_volcano_pods(k8s, namespace, "tf6")),
        timeout=120,
        what="2 Volcano pods",
    )
    spec = wait_spec(k8s, namespace, "rings-config-tf6", timeout=180)
    pods = _finished(k8s, namespace, pods)
    by_name = {p.metadata.name: p for p in pods}
    ipv6 = []
    for name in ("tf6-worker-0", "tf6-worker-1"):
        ips = _pod_ips(by_name[name])
        assert [ipaddress.ip_address(ip).version for ip in ips] == list(_families(workloads)), ips
        (v6,) = [ip for ip in ips if ":" in ip]
        assert ipaddress.ip_address(v6) in node.POD_CIDR6
        ipv6.append(v6)
    assert [(m["pod"], m["ip"], m["port"]) for m in spec["members"]] == [
        ("tf6-worker-0", ipv6[0], 2222),
        ("tf6-worker-1", ipv6[1], 2222),
    ]
    for rank, name in enumerate(("tf6-worker-0", "tf6-worker-1")):
        text = k8s.core.read_namespaced_pod_log(name, namespace)
        _check_exports(_exported(text), ips=ipv6, port=2222, rank=rank)
        log = nodejobs.parse_log(name, text)
        assert log.result, text[-1500:]
        assert log.result["tf_config"]["cluster"]["worker"] == [f"[{ip}]:2222" for ip in ipv6]
    results = [
        nodejobs.parse_log(p.metadata.name, k8s.core.read_namespaced_pod_log(p.metadata.name, namespace)) for p in pods
    ]
    assert len({w.result["weights_sha256"] for w in results if w.result}) == 1, "workers ended with different weights"


def test_a_job_without_the_annotation_lists_every_member_at_its_primary_ip(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path, workloads: Cluster
) -> None:
    job = volcano_job(
        "primary", data=cifar, workers=2,
        command=[*nodejobs.LAUNCH, "--timeout", "120", "--", "python3", "-c", SHOW_EXPORTS], args=[],
    )  # fmt: skip
    k8s.custom.create_namespaced_custom_object(*VOLCANO, namespace, "jobs", job)
    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 else None)(_volcano_pods(k8s, namespace, "primary")),
        timeout=120,
        what="2 Volcano pods",
    )
    pods = _finished(k8s, namespace, pods)
    primary = [p.status.pod_ip for p in sorted(pods, key=lambda p: p.metadata.name)]
    # The primary IP is of the cluster's first family (IPv4 on the default dual-stack cluster), for every member.
    assert {ipaddress.ip_address(ip).version for ip in primary} == {_families(workloads)[0]}
    assert all(len(_pod_ips(p)) == len(_families(workloads)) for p in pods)
    for rank, name in enumerate(("primary-worker-0", "primary-worker-1")):
        _check_exports(_exported(k8s.core.read_namespaced_pod_log(name, namespace)), ips=primary, port=2222, rank=rank)
