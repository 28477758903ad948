"""hostNetwork ports and secondary networks on the real control plane (kwok nodes).

Pods are real objects: the scheduler places them, kwok sets their status
(a ``hostNetwork`` pod gets its node's IP), and the network-status annotation
is written the way Multus writes it: a patch of the pod once its sandbox has
its interfaces, in the format of the Network Plumbing Working Group's
multi-network specification (v1.2, 4.1.2), indented as Multus indents it.
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from model.keys import REGISTERED_ANNOTATION
from ranktable.registration import registration_value
from ringcontroller.resource import RESOURCE_CLAIMS, RESOURCE_CLAIMS_OLDER
from ringdevcluster.kwok import node_manifest
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import deployment, pod_template, volcano_job, volcano_pod
from tests.support.kubectlring import ring, section
from tests.support.kubehelp import (
    create_pods,
    create_volcano_job,
    events_for,
    read_configmap,
    running_pods,
    wait_for,
    wait_spec,
)

pytestmark = pytest.mark.integration

KWOK_NODE = "kwok-node-0"
Json = dict[str, Any]


def _warnings(k8s: Any, namespace: str, name: str, reason: str) -> list[Any]:
    return [e for e in events_for(k8s, namespace, name) if e.type == "Warning" and e.reason == reason]


def _env(pod: str, namespace: str, kubeconfig: Path) -> dict[str, str]:
    done = ring("env", "-n", namespace, pod, kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in (shlex.split(x)[0] for x in done.stdout.splitlines() if "=" in x))


def test_host_network_pods_of_a_deployment_on_one_node_get_distinct_ports(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    dep = deployment("hostnet", 2)
    template = dep["spec"]["template"]
    template["spec"]["hostNetwork"] = True
    template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": KWOK_NODE}
    template["spec"]["containers"][0].pop("ports")  # a named container port would be a hostPort
    template["metadata"]["annotations"] = {"ring-controller/port": "4000"}
    k8s.apps.create_namespaced_deployment(namespace, dep)
    spec = wait_spec(k8s, namespace, "rings-config-hostnet")
    live = wait_for(lambda: running_pods(k8s, namespace, [m["pod"] for m in spec["members"]]), what="pods running")
    host_ip = {live[m["pod"]].status.pod_ip for m in spec["members"]}
    assert len(host_ip) == 1 and host_ip == {live[m["pod"]].status.host_ip for m in spec["members"]}
    ip = next(iter(host_ip))
    assert [(m["ip"], m["port"]) for m in spec["members"]] == [(ip, 4000), (ip, 4001)]
    env = _env(spec["members"][1]["pod"], namespace, kubeconfig)
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == [f"{ip}:4000", f"{ip}:4001"]
    assert (env["RING_PORT"], env["MASTER_PORT"], env["HCCL_IF_BASE_PORT"]) == ("4001", "4000", "60032")


def test_two_host_ports_on_one_node_make_the_job_invalid_with_the_reason(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    template = pod_template(port=2222)  # tf-port: in a hostNetwork pod, a hostPort
    template["spec"]["hostNetwork"] = True
    job = create_volcano_job(k8s, namespace, volcano_job("fixed", tasks=[("worker", 2)], template=template))
    # Placed on one node by name, as a user pinning them would (the scheduler would keep them apart).
    create_pods(k8s, job, [("worker", 0), ("worker", 1)], node=KWOK_NODE)
    wait_for(lambda: _warnings(k8s, namespace, "fixed", "AddressCollision"), what="the AddressCollision Event")
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason="address_collision") or 0) >= 1
    assert wait_spec(k8s, namespace, "rings-config-fixed", status="initializing")["members"] == []
    text = ring("describe", "-n", namespace, "fixed", kubeconfig=kubeconfig).stdout
    assert "fixed-worker-0 and fixed-worker-1 would both listen on" in text
    assert "a hostPort, which cannot move" in text and "Two members would listen on one ip:port" in text
    assert controller.proc is not None and controller.proc.poll() is None


MULTUS_STATUS = """[{
    "name": "kwok-pod-network",
    "ips": [
        "%(pod_ip)s"
    ],
    "default": true,
    "dns": {}
},{
    "name": "%(network)s",
    "interface": "net1",
    "ips": [
        "192.168.77.%(n)d"
    ],
    "mac": "2e:51:e6:31:96:%(n)02x",
    "dns": {}
}]"""


def _attach(k8s: Any, namespace: str, pod: str, *, network: str, n: int) -> None:
    """Write the pod's network-status as Multus does once the sandbox has its interfaces."""
    ip = k8s.core.read_namespaced_pod(pod, namespace).status.pod_ip
    status = MULTUS_STATUS % {"pod_ip": ip, "network": network, "n": n}
    k8s.core.patch_namespaced_pod(
        pod, namespace, {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status": status}}}
    )


def test_a_network_job_waits_for_the_attachment_then_lists_its_addresses_and_interface(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    raw = volcano_job("fast", tasks=[("worker", 2)])
    raw["metadata"]["annotations"] = {"ring-controller.io/network": "fast-net"}
    job = create_volcano_job(k8s, namespace, raw)
    create_pods(k8s, job, [("worker", 0), ("worker", 1)])
    names = ["fast-worker-0", "fast-worker-1"]
    wait_for(lambda: running_pods(k8s, namespace, names), what="pods running")
    wait_for(lambda: _warnings(k8s, namespace, "fast", "NetworkNotAttached"), what="the NetworkNotAttached Event")
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason="network_missing") or 0) >= 1
    text = ring("describe", "-n", namespace, "fast", kubeconfig=kubeconfig).stdout
    slots = section(text, "Members (rank order, as the controller sees them now):")
    assert "not on network" in slots and f"no address on network {namespace}/fast-net" in text
    # Attached to another network only: still waits, and says which it has.
    _attach(k8s, namespace, names[0], network=f"{namespace}/fast-net", n=10)
    _attach(k8s, namespace, names[1], network=f"{namespace}/slow-net", n=11)
    wait_for(
        lambda: any(
            f"is not attached to network {namespace}/fast-net" in (e.message or "")
            for e in _warnings(k8s, namespace, "fast", "NetworkNotAttached")
        ),
        what="the Event naming the missing attachment",
    )
    assert wait_spec(k8s, namespace, "rings-config-fast", status="initializing")["members"] == []
    _attach(k8s, namespace, names[1], network=f"{namespace}/fast-net", n=11)
    spec = wait_spec(k8s, namespace, "rings-config-fast")
    assert [(m["ip"], m["interface"]) for m in spec["members"]] == [
        ("192.168.77.10", "net1"),
        ("192.168.77.11", "net1"),
    ]
    env = _env(names[1], namespace, kubeconfig)
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == ["192.168.77.10:2222", "192.168.77.11:2222"]
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"], env["HCCL_IF_IP"]) == (
        "=net1",
        "net1",
        "192.168.77.11",
    )


def test_a_malformed_network_status_warns_and_writes_nothing(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    raw = volcano_job("garbled", tasks=[("worker", 1)])
    raw["metadata"]["annotations"] = {"ring-controller.io/network": "fast-net"}
    job = create_volcano_job(k8s, namespace, raw)
    create_pods(k8s, job, [("worker", 0)], annotations={"k8s.v1.cni.cncf.io/network-status": '[{"name": 7}]'})
    wait_for(lambda: _warnings(k8s, namespace, "garbled", "InvalidNetworkStatus"), what="the Event")
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason="invalid_network_status") or 0) >= 1
    assert wait_spec(k8s, namespace, "rings-config-garbled", status="initializing")["members"] == []


@pytest.fixture
def dual_stack_node(k8s: Any) -> Iterator[str]:
    """A kwok node whose pod CIDRs are of both families: kwok gives its pods one IP of each (IPv4 first)."""
    manifest = node_manifest(200)
    name = f"kwok-dual-{secrets.token_hex(3)}"
    manifest["metadata"]["name"] = name
    manifest["metadata"]["labels"]["kubernetes.io/hostname"] = name
    manifest["spec"] = {"podCIDR": "127.1.200.0/24", "podCIDRs": ["127.1.200.0/24", "fd00:10:200::/64"]}
    k8s.core.create_node(manifest)
    yield name
    k8s.core.delete_node(name)


def test_a_dual_stack_job_asking_for_ipv6_trains_on_bracketed_addresses(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path, dual_stack_node: str
) -> None:
    raw = volcano_job("six", tasks=[("chief", 1), ("worker", 1)])
    raw["metadata"]["annotations"] = {"ring-controller.io/ip-family": "IPv6"}
    job = create_volcano_job(k8s, namespace, raw)
    create_pods(k8s, job, [("chief", 0), ("worker", 0)], node=dual_stack_node)
    spec = wait_spec(k8s, namespace, "rings-config-six")
    live = running_pods(k8s, namespace, [m["pod"] for m in spec["members"]])
    assert live is not None
    for m in spec["members"]:
        ips = [a.ip for a in live[m["pod"]].status.pod_ips]
        assert len(ips) == 2 and ":" not in ips[0] and m["ip"] == ips[1]  # the IPv6 one, not the primary
    chief, worker = (m["ip"] for m in spec["members"])
    env = _env("six-worker-0", namespace, kubeconfig)
    assert json.loads(env["TF_CONFIG"])["cluster"] == {"chief": [f"[{chief}]:2222"], "worker": [f"[{worker}]:2222"]}
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (chief, "2222")
    assert env["JAX_COORDINATOR_ADDRESS"] == f"[{chief}]:2222"
    assert env["HCCL_SOCKET_FAMILY"] == env["NCCL_SOCKET_FAMILY"] == "AF_INET6"
    # The same job on an IPv4-only node waits, saying why.
    raw = volcano_job("sixonfour", tasks=[("worker", 1)])
    raw["metadata"]["annotations"] = {"ring-controller.io/ip-family": "IPv6"}
    create_pods(k8s, create_volcano_job(k8s, namespace, raw), [("worker", 0)], node=KWOK_NODE)
    wait_for(lambda: _warnings(k8s, namespace, "sixonfour", "NoAddressOfFamily"), what="the NoAddressOfFamily Event")
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason="ip_family") or 0) >= 1
    text = ring("describe", "-n", namespace, "sixonfour", kubeconfig=kubeconfig).stdout
    assert "no IP of family" in text and "has no IPv6 address" in text
    assert wait_spec(k8s, namespace, "rings-config-sixonfour", status="initializing")["members"] == []


def test_a_dual_stack_member_registers_every_ip_and_counts_by_the_family_asked(
    k8s: Any, namespace: str, idle_node: str, registering_controller: ControllerProcess
) -> None:
    raw = volcano_job("regsix", tasks=[("worker", 1)])
    raw["metadata"]["annotations"] = {"ring-controller.io/ip-family": "IPv6"}
    job = create_volcano_job(k8s, namespace, raw)
    (pod,) = create_pods(k8s, job, [("worker", 0)], node=idle_node)
    name = pod["metadata"]["name"]
    # As the kubelet reports a pod before its containers run, then as its launcher registers (POD_IPS set).
    k8s.core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Pending", "hostIP": "10.0.0.77"}})
    value = registration_value(ip="127.1.201.2", started="2026-12-03T08:00:00Z", ips=("127.1.201.2", "fd00:201::2"))
    k8s.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {REGISTERED_ANNOTATION: value}}})
    spec = wait_spec(k8s, namespace, "rings-config-regsix")
    assert spec["members"][0]["ip"] == "fd00:201::2"
    written = read_configmap(k8s, namespace, "rings-config-regsix").metadata.resource_version
    # The kubelet's Running status with both IPs: the controller syncs it and writes nothing.
    before = _reconciles(registering_controller)
    k8s.core.patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "phase": "Running",
                "podIP": "127.1.201.2",
                "podIPs": [{"ip": "127.1.201.2"}, {"ip": "fd00:201::2"}],
            }
        },
    )
    wait_for(lambda: _reconciles(registering_controller) > before, what="the controller syncing the Running pod")
    assert read_configmap(k8s, namespace, "rings-config-regsix").metadata.resource_version == written


def _reconciles(proc: ControllerProcess) -> float:
    return sum(
        proc.metric("controller_runtime_reconcile_total", result=r) or 0.0
        for r in ("success", "error", "requeue", "requeue_after")
    )


def _claims_version(k8s: Any) -> str:
    """The newest ResourceClaim version the server serves, as the controller picks it: ``v1`` from
    Kubernetes 1.34, ``v1beta1`` on a 1.32 dev cluster (which turns DRA on)."""
    group = client.ApisApi(k8s.api).get_api_versions()
    served = {v.version for g in group.groups if g.name == "resource.k8s.io" for v in g.versions}
    version = next((r.version for r in (RESOURCE_CLAIMS, *RESOURCE_CLAIMS_OLDER) if r.version in served), None)
    assert version is not None, f"the server serves no resource.k8s.io ResourceClaims (it serves {sorted(served)})"
    return version


def _nic_claim(name: str, *, version: str) -> Json:
    request: Json = {"name": "nic"}
    if version == "v1beta1":
        request["deviceClassName"] = "nic.example.com"  # v1beta1 has no `exactly` (it came with v1beta2)
    else:
        request["exactly"] = {"deviceClassName": "nic.example.com"}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def _report_nic(k8s: Any, namespace: str, name: str, *, n: int, version: str) -> None:
    """Allocate the claim's device and report its NIC, as the scheduler and a DRA network driver would."""
    device = {"driver": "nic.example.com", "pool": "kwok-node-0", "device": f"nic-{n}"}
    status = {
        "status": {
            "allocation": {"devices": {"results": [{**device, "request": "nic"}]}},
            "devices": [
                {
                    **device,
                    "networkData": {
                        "interfaceName": "eth9",
                        "ips": [f"192.0.2.{n}/24"],
                        "hardwareAddress": f"aa:bb:cc:00:00:{n:02x}",
                    },
                }
            ],
        }
    }
    k8s.custom.patch_namespaced_custom_object_status(
        "resource.k8s.io", version, namespace, "resourceclaims", name, status
    )


def test_a_claim_job_waits_for_the_dra_driver_then_lists_each_nics_address(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    version = _claims_version(k8s)
    for i in range(2):
        k8s.custom.create_namespaced_custom_object(
            "resource.k8s.io", version, namespace, "resourceclaims", _nic_claim(f"nic-{i}", version=version)
        )
    raw = volcano_job("dra", tasks=[("worker", 2)])
    raw["metadata"]["annotations"] = {"ring-controller.io/network-claim": "nic"}
    job = create_volcano_job(k8s, namespace, raw)
    for i in range(2):
        (pod,) = [volcano_pod(job, task="worker", index=i, node=KWOK_NODE)]
        pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimName": f"nic-{i}"}]
        k8s.core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: running_pods(k8s, namespace, ["dra-worker-0", "dra-worker-1"]), what="pods running")
    wait_for(
        lambda: any(
            "ResourceClaim nic-1 reports no address yet" in (e.message or "")
            for e in _warnings(k8s, namespace, "dra", "NetworkNotAttached")
        ),
        what="the NetworkNotAttached Event naming the claim",
    )
    text = ring("describe", "-n", namespace, "dra", kubeconfig=kubeconfig).stdout
    assert "not on network" in text and "ResourceClaim nic-0 reports no address yet" in text
    _report_nic(k8s, namespace, "nic-0", n=10, version=version)
    _report_nic(k8s, namespace, "nic-1", n=11, version=version)
    spec = wait_spec(k8s, namespace, "rings-config-dra")
    assert [(m["ip"], m["interface"]) for m in spec["members"]] == [("192.0.2.10", "eth9"), ("192.0.2.11", "eth9")]
    env = _env("dra-worker-0", namespace, kubeconfig)
    assert (env["GLOO_SOCKET_IFNAME"], env["MASTER_ADDR"]) == ("eth9", "192.0.2.10")
