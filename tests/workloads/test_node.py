"""The dev cluster's real node: a kubelet runs containers, CoreDNS resolves names, kube-proxy serves Services.

The workloads cluster runs ``--with node`` (``tests/workloads/conftest.py``):
kubelet and kube-proxy of the control plane's release, containerd + runc, the
CNI bridge ``ringbr0`` and CoreDNS behind the ``kube-dns`` Service. The test
image is Debian's static busybox, imported without a registry
(``tests/support/realnode.py``). Every target is a pod, the node's bridge
address or loopback.
"""

from __future__ import annotations

import ipaddress
import json
import os
import ssl
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from ringdevcluster import Cluster, node
from tests.support.kubehelp import wait_for
from tests.support.realnode import exec_in, node_pod, wait_running
from tests.support.workloads import Json

pytestmark = pytest.mark.integration


def _listening(pid: int) -> set[str]:
    """``ip:port`` of every TCP socket process ``pid`` listens on (IPv4 and IPv6, as in /proc/net)."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            lines = f.read().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:
                hexip, hexport = local.split(":")
                if len(hexip) == 8:
                    ip = str(ipaddress.IPv4Address(bytes.fromhex(hexip)[::-1]))
                else:
                    raw = b"".join(bytes.fromhex(hexip[i : i + 8])[::-1] for i in range(0, 32, 8))
                    ip = str(ipaddress.IPv6Address(raw))
                found.add(f"{ip}:{int(hexport, 16)}")
    return found


def _create(k8s: Any, namespace: str, manifest: Json) -> None:
    if manifest["kind"] == "Pod":
        k8s.core.create_namespaced_pod(namespace, manifest)
    elif manifest["kind"] == "Service":
        k8s.core.create_namespaced_service(namespace, manifest)
    elif manifest["kind"] == "ConfigMap":
        k8s.core.create_namespaced_config_map(namespace, manifest)
    else:
        raise AssertionError(manifest["kind"])


# --------------------------------------------------------------------------
# the node itself


def test_real_node_is_ready_labelled_tainted_and_runs_the_control_planes_release(k8s: Any, real_node: Cluster) -> None:
    found = k8s.api.sanitize_for_serialization(k8s.core.read_node(node.NODE_NAME))
    assert found["metadata"]["labels"][node.NODE_LABEL[0]] == node.NODE_LABEL[1]
    assert "type" not in found["metadata"]["labels"]  # not a kwok node
    assert node.NODE_TAINT in found["spec"]["taints"]
    ready = next(c for c in found["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready
    assert {"type": "InternalIP", "address": node.NODE_IP} in found["status"]["addresses"]
    version = client.VersionApi(k8s.api).get_code().git_version
    assert found["status"]["nodeInfo"]["kubeletVersion"] == version == real_node.versions["node"]
    assert found["status"]["nodeInfo"]["kubeProxyVersion"] in ("", version)  # deprecated field
    assert found["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")


def test_node_processes_listen_on_loopback_and_the_bridge_address_only(real_node: Cluster) -> None:
    statuses = {s.name: s for s in real_node.status()}
    addrs = node.addresses(real_node.ip_family)
    everything = set()
    for name in node.PROCESSES:
        assert statuses[name].healthy, (name, statuses[name].detail)
        listening = _listening(statuses[name].pid or 0)
        everything |= listening
        allowed = ("127.0.0.1:", "::1:", *(f"{ip}:" for ip in addrs.node_ips))
        assert all(a.startswith(allowed) for a in listening), (name, listening)
    # The kubelet's API, CoreDNS (TCP side) and the API relay, on the bridge's primary address;
    # CoreDNS on each of its addresses.
    primary = addrs.node_ip
    assert {f"{primary}:10250", f"{primary}:443", *(f"{ip}:53" for ip in addrs.node_ips)} <= everything


# --------------------------------------------------------------------------
# pods


def test_a_pod_runs_on_the_real_node_with_an_address_on_the_bridge(
    k8s: Any, namespace: str, busybox_image: str
) -> None:
    _create(k8s, namespace, node_pod("ip", image=busybox_image, script="ip -4 addr show eth0; exec sleep 3600"))
    pod = wait_running(k8s.core, namespace, "ip")
    assert pod["spec"]["nodeName"] == node.NODE_NAME
    assert pod["status"]["hostIP"] == node.NODE_IP
    pod_ip = ipaddress.ip_address(pod["status"]["podIP"])
    assert pod_ip in node.POD_CIDR and str(pod_ip) != node.NODE_IP
    # The container sees that address on its own interface (its own network namespace).
    shown = exec_in(k8s.api, namespace, "ip", ["ip", "-4", "addr", "show", "eth0"])
    assert f"inet {pod_ip}/{node.POD_CIDR.prefixlen}" in shown
    # No route out of the machine: only the bridge and the Service range.
    routes = exec_in(k8s.api, namespace, "ip", ["ip", "route"])
    assert "default" not in routes, routes
    assert f"{node.SERVICE_CIDR} via {node.NODE_IP}" in routes, routes


def test_dual_stack_pods_have_an_ipv6_address_on_the_bridge_and_reach_each_other_over_it(
    k8s: Any, namespace: str, busybox_image: str, real_node: Cluster
) -> None:
    assert real_node.ip_family == "dual", (
        f"the workloads cluster is {real_node.ip_family}, not dual-stack (the default)"
    )
    for name in ("v6-a", "v6-b"):
        _create(k8s, namespace, node_pod(name, image=busybox_image, script="exec sleep 3600"))
    pods = [wait_running(k8s.core, namespace, name) for name in ("v6-a", "v6-b")]
    ips = [[entry["ip"] for entry in p["status"]["podIPs"]] for p in pods]
    for pod, (v4, v6) in zip(pods, ips, strict=True):
        # IPv4 first (the primary podIP), then one IPv6 unique local address from the bridge's /64.
        assert pod["status"]["podIP"] == v4 and ipaddress.ip_address(v4) in node.POD_CIDR
        assert ipaddress.ip_address(v6) in node.POD_CIDR6 and v6 != node.NODE_IP6
    shown = exec_in(k8s.api, namespace, "v6-a", ["ip", "-6", "addr", "show", "eth0"])
    assert f"inet6 {ips[0][1]}/{node.POD_CIDR6.prefixlen}" in shown, shown
    # No IPv6 route out of the machine either: the bridge's /64 and the IPv6 Service range only.
    routes = exec_in(k8s.api, namespace, "v6-a", ["ip", "-6", "route"])
    assert "default" not in routes, routes
    assert f"{node.SERVICE_CIDR6} via {node.NODE_IP6}" in routes, routes
    # Pod to pod and pod to node over IPv6, across the bridge.
    for target in (ips[1][1], node.NODE_IP6):
        out = exec_in(k8s.api, namespace, "v6-a", ["ping", "-6", "-c", "1", "-W", "5", target])
        assert "1 packets received" in out, out


def test_a_configmap_volume_is_mounted_by_the_kubelet(k8s: Any, namespace: str, busybox_image: str) -> None:
    spec = {"status": "completed", "members": [{"rank": 0, "ip": "10.244.0.9"}]}
    _create(k8s, namespace, {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rings-config"},
        "data": {"cluster.json": json.dumps(spec)},
    })  # fmt: skip
    pod = node_pod(
        "reader",
        image=busybox_image,
        script="cat /etc/ring-config/cluster.json; echo; exec sleep 3600",
        volumes=[{"name": "rings-config", "configMap": {"name": "rings-config"}}],
    )
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "rings-config", "mountPath": "/etc/ring-config"}]
    _create(k8s, namespace, pod)
    wait_running(k8s.core, namespace, "reader")
    # Read inside the container (exec through the kubelet) and from its log.
    inside = exec_in(k8s.api, namespace, "reader", ["cat", "/etc/ring-config/cluster.json"])
    assert json.loads(inside) == spec
    # The kubelet's atomic writer layout: the key is a symlink into ..data.
    listing = exec_in(k8s.api, namespace, "reader", ["ls", "-la", "/etc/ring-config"])
    assert "..data ->" in listing and "cluster.json -> ..data/cluster.json" in listing, listing
    logged = wait_for(
        lambda: k8s.core.read_namespaced_pod_log("reader", namespace).strip() or None, what="the reader's log"
    )
    assert json.loads(logged) == spec


def test_pods_resolve_service_and_pod_names_through_coredns(k8s: Any, namespace: str, busybox_image: str) -> None:
    # A headless Service and a pod that names it as its subdomain.
    _create(k8s, namespace, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "workers"},
        "spec": {"clusterIP": "None", "selector": {"app": "worker"}, "ports": [{"name": "tf", "port": 2222}]},
    })  # fmt: skip
    worker = node_pod(
        "worker-0", image=busybox_image, script="exec sleep 3600", labels={"app": "worker"},
        hostname="worker-0", subdomain="workers",
    )  # fmt: skip
    _create(k8s, namespace, worker)
    _create(k8s, namespace, node_pod("client", image=busybox_image, script="exec sleep 3600"))
    worker_ip = wait_running(k8s.core, namespace, "worker-0")["status"]["podIP"]
    wait_running(k8s.core, namespace, "client")
    resolv = exec_in(k8s.api, namespace, "client", ["cat", "/etc/resolv.conf"])
    assert f"nameserver {node.DNS_SERVICE_IP}" in resolv
    assert f"search {namespace}.svc.{node.CLUSTER_DOMAIN}" in resolv

    def lookup(name: str) -> str:
        return exec_in(k8s.api, namespace, "client", ["nslookup", name])

    api = lookup(f"kubernetes.default.svc.{node.CLUSTER_DOMAIN}")
    assert "Address: 10.96.0.1" in api, api
    # The pod's name appears once its endpoint is ready (CoreDNS does not
    # cache cluster.local answers: kubeadm's `cache 30` excludes them).
    pod_name = f"worker-0.workers.{namespace}.svc.{node.CLUSTER_DOMAIN}"
    answer = wait_for(
        lambda: (out := lookup(pod_name)) and f"Address: {worker_ip}" in out and out,
        timeout=60, interval=0.5, what=f"{pod_name} -> {worker_ip}",
    )  # fmt: skip
    assert f"Name:\t{pod_name}" in answer or f"Name:   {pod_name}" in answer or pod_name in answer


def test_the_kubernetes_service_reaches_the_api_server_from_pods_and_the_node(
    k8s: Any, namespace: str, busybox_image: str, real_node: Cluster
) -> None:
    env_script = "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; exec sleep 3600"
    _create(k8s, namespace, node_pod("incluster", image=busybox_image, script=env_script))
    wait_running(k8s.core, namespace, "incluster")
    logged = wait_for(lambda: k8s.core.read_namespaced_pod_log("incluster", namespace).strip() or None, what="log")
    assert logged == "10.96.0.1:443"
    # From the pod's network namespace, through kube-proxy and the relay: the
    # API server's HTTPS listener answers (busybox's TLS cannot talk to it,
    # so plain HTTP is sent, which Go's TLS server answers in plain text).
    reply = exec_in(
        k8s.api, namespace, "incluster",
        ["sh", "-c", "printf 'GET /version HTTP/1.0\\r\\n\\r\\n' | nc -w 5 kubernetes.default.svc.cluster.local 443"],
    )  # fmt: skip
    assert "Client sent an HTTP request to an HTTPS server" in reply, reply
    # The same ClusterIP from the node, with TLS verified against the cluster
    # CA for the Service's name: the relay passes the API server's own handshake.
    context = ssl.create_default_context(cafile=str(real_node.ca_cert))
    context.load_cert_chain(str(real_node.pki.cert("admin")), str(real_node.pki.key("admin")))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    request = urllib.request.Request("https://10.96.0.1/version")
    with opener.open(request, timeout=10) as response:
        served = json.loads(response.read())
    assert served["gitVersion"] == client.VersionApi(k8s.api).get_code().git_version
