"""The real node's configuration (ring-devcluster ``--with node``), without starting anything.

What is checked here is what docs/devcluster.md promises about the node: kubeadm's
defaults where this machine allows them, the settings it forces, and a pod
network that cannot leave the bridge.
"""

from __future__ import annotations

import io
import ipaddress
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringdevcluster import addons, build, controlplane, images, netstatus, node
from ringdevcluster.pki import Pki

pytestmark = pytest.mark.tools


def _configure(state: Path, ip_family: str) -> tuple[Path, controlplane.Setup]:
    pki = Pki(state / "pki")
    pki.init_ca()
    ports = {key: 30000 + i for i, key in enumerate(addons.ADDONS["node"].ports)}
    binaries = {b: Path(f"/cache/{b}") for b in ("kubelet", "kube-proxy", "relay", "coredns", "pause")}
    setup = node.configure(
        state_dir=state, server="https://127.0.0.1:6443", pki=pki, ports=ports, binaries=binaries, ip_family=ip_family
    )
    return state / "node", setup


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, controlplane.Setup]:
    """The node of a cluster of the default IP family (dual-stack, IPv4 first)."""
    assert controlplane.DEFAULT_IP_FAMILY == "dual"
    return _configure(tmp_path_factory.mktemp("state"), "dual")


def test_kubelet_keeps_production_defaults_and_only_the_forced_settings(
    configured: tuple[Path, controlplane.Setup],
) -> None:
    home, _ = configured
    config = yaml.safe_load((home / "kubelet" / "config.yaml").read_text())
    # Left at their defaults, as on a kubeadm node (the delivery figures depend on them).
    for default in ("syncFrequency", "configMapAndSecretChangeDetectionStrategy", "fileCheckFrequency"):
        assert default not in config
    # Forced by this machine: cgroups v1 without systemd.
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["clusterDNS"] == [node.DNS_SERVICE_IP] and config["clusterDomain"] == "cluster.local"
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert config["address"] == node.NODE_IP and config["healthzBindAddress"] == "127.0.0.1"
    assert node.NODE_TAINT in config["registerWithTaints"]


def test_pod_network_has_no_masquerade_and_no_default_route(configured: tuple[Path, controlplane.Setup]) -> None:
    home, _ = configured
    conflist = json.loads(next((home / "cni" / "net.d").glob("*.conflist")).read_text())
    (bridge,) = conflist["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == node.BRIDGE
    assert bridge["ipMasq"] is False and bridge["isDefaultGateway"] is False
    # Dual-stack, IPv4 first: one address of each family per pod, a route to each Service range.
    assert bridge["ipam"]["ranges"] == [
        [{"subnet": str(node.POD_CIDR), "gateway": node.NODE_IP}],
        [{"subnet": str(node.POD_CIDR6), "gateway": node.NODE_IP6}],
    ]
    routes = bridge["ipam"]["routes"]
    assert routes == [
        {"dst": controlplane.SERVICE_CIDR, "gw": node.NODE_IP},
        {"dst": controlplane.SERVICE_CIDR6, "gw": node.NODE_IP6},
    ]
    assert ipaddress.ip_address(node.DNS_SERVICE_IP) in ipaddress.ip_network(controlplane.SERVICE_CIDR)
    assert ipaddress.ip_address(node.NODE_IP) == node.POD_CIDR.network_address + 1
    assert ipaddress.ip_address(node.NODE_IP6) == node.POD_CIDR6.network_address + 1


def test_ipv6_ranges_are_unique_local_and_apart() -> None:
    # RFC 4193 unique local addresses (fc00::/7, the fd half), under one /48 of their own.
    ula = ipaddress.ip_network("fd72:696e:6700::/48")
    service6 = ipaddress.ip_network(controlplane.SERVICE_CIDR6)
    assert node.POD_CIDR6.subnet_of(ula) and service6.subnet_of(ula)  # type: ignore[arg-type]
    assert ula.subnet_of(ipaddress.ip_network("fd00::/8"))
    assert not node.POD_CIDR6.overlaps(service6)
    assert ipaddress.ip_address(node.DNS_SERVICE_IP6) in service6
    assert ipaddress.ip_address(controlplane.SERVICE_IP6) in service6
    assert controlplane.service_cidrs("dual") == [controlplane.SERVICE_CIDR, controlplane.SERVICE_CIDR6]
    assert controlplane.service_cidrs("ipv6") == [controlplane.SERVICE_CIDR6]
    with pytest.raises(ValueError, match="dual, ipv4, ipv6"):
        controlplane.check_ip_family("IPv6")


def test_ipv6_only_node_serves_and_routes_on_its_ipv6_address(tmp_path: Path) -> None:
    home, setup = _configure(tmp_path, "ipv6")
    conflist = json.loads(next((home / "cni" / "net.d").glob("*.conflist")).read_text())
    ipam = conflist["plugins"][0]["ipam"]
    assert ipam["ranges"] == [[{"subnet": str(node.POD_CIDR6), "gateway": node.NODE_IP6}]]
    assert ipam["routes"] == [{"dst": controlplane.SERVICE_CIDR6, "gw": node.NODE_IP6}]
    kubelet = yaml.safe_load((home / "kubelet" / "config.yaml").read_text())
    assert kubelet["address"] == node.NODE_IP6 and kubelet["clusterDNS"] == [node.DNS_SERVICE_IP6]
    assert f"--node-ip={node.NODE_IP6}" in setup.argv["kubelet"]
    assert f"--listen=[{node.NODE_IP6}]:443" in setup.argv["apiserver-relay"]
    proxy = yaml.safe_load((home / "kube-proxy" / "config.yaml").read_text())
    assert proxy["bindAddress"] == node.NODE_IP6 and proxy["nodePortAddresses"] == [f"{node.NODE_IP6}/128"]
    assert f"bind {node.NODE_IP6}\n" in (home / "coredns" / "Corefile").read_text()
    found = dict(node.objects(ip_family="ipv6"))
    dns = found["/api/v1/namespaces/kube-system/services/kube-dns"]
    assert dns["spec"]["clusterIP"] == node.DNS_SERVICE_IP6
    slices = [o for o in found.values() if o["kind"] == "EndpointSlice"]
    assert {s["addressType"] for s in slices} == {"IPv6"}
    assert all(s["endpoints"][0]["addresses"] == [node.NODE_IP6] for s in slices)


def test_dual_stack_node_is_reached_at_its_ipv4_address_first(configured: tuple[Path, controlplane.Setup]) -> None:
    _, setup = configured
    assert f"--node-ip={node.NODE_IP},{node.NODE_IP6}" in setup.argv["kubelet"]
    assert f"--listen={node.NODE_IP}:443" in setup.argv["apiserver-relay"]
    found = dict(node.objects(ip_family="dual"))
    assert found["/api/v1/namespaces/kube-system/services/kube-dns"]["spec"]["clusterIP"] == node.DNS_SERVICE_IP
    assert {o["addressType"] for o in found.values() if o["kind"] == "EndpointSlice"} == {"IPv4"}


def test_containerd_cri_settings_this_machine_needs(configured: tuple[Path, controlplane.Setup]) -> None:
    home, _ = configured
    toml = (home / "containerd" / "config.toml").read_text()
    for line in (
        "restrict_oom_score_adj = true",
        "disable_apparmor = true",
        "SystemdCgroup = false",
        f'sandbox_image = "{images.PAUSE_IMAGE}"',
        f'address = "{node.CONTAINERD_SOCKET}"',
    ):
        assert line in toml


def test_corefile_is_kubeadms_without_forward(configured: tuple[Path, controlplane.Setup]) -> None:
    home, _ = configured
    corefile = (home / "coredns" / "Corefile").read_text()
    words = [line.split()[0] for line in corefile.splitlines() if line.strip() and line.startswith("    ")]
    assert "forward" not in words
    for plugin in ("errors", "health", "ready", "kubernetes", "prometheus", "cache", "loop", "reload", "loadbalance"):
        assert plugin in words
    assert "cache 30 {" in corefile and "disable success cluster.local" in corefile
    assert f"bind {node.NODE_IP} {node.NODE_IP6}\n" in corefile


def test_kube_proxy_leaves_conntrack_and_localhost_alone(configured: tuple[Path, controlplane.Setup]) -> None:
    home, _ = configured
    config = yaml.safe_load((home / "kube-proxy" / "config.yaml").read_text())
    assert config["mode"] == "iptables"
    assert config["iptables"]["localhostNodePorts"] is False
    assert config["nodePortAddresses"] == [f"{node.NODE_IP}/32", f"{node.NODE_IP6}/128"]
    assert config["conntrack"]["maxPerCore"] == 0


def test_api_server_reaches_the_kubelet_by_internal_ip_with_a_client_certificate(
    configured: tuple[Path, controlplane.Setup],
) -> None:
    _, setup = configured
    flags = dict(a.split("=", 1) for a in setup.apiserver_args)
    assert flags["--kubelet-preferred-address-types"] == "InternalIP"
    assert Path(flags["--kubelet-client-certificate"]).is_file()
    assert list(setup.argv) == list(node.PROCESSES)
    assert [p.name for p in addons.ADDONS["node"].processes] == list(node.PROCESSES)


def test_namespace_placement_is_the_pod_placement_for_the_admission_plugins() -> None:
    annotations = node.namespace_placement()
    selector = annotations["scheduler.alpha.kubernetes.io/node-selector"]
    assert dict([selector.split("=", 1)]) == node.pod_placement()["nodeSelector"]
    tolerations = json.loads(annotations["scheduler.alpha.kubernetes.io/defaultTolerations"])
    assert tolerations == node.pod_placement()["tolerations"]


def test_add_flags_appends_replaces_and_reports_changes() -> None:
    argv = ["kube-apiserver", "--v=1", "--kubelet-preferred-address-types=Hostname"]
    assert controlplane.add_flags(argv, ["--kubelet-preferred-address-types=InternalIP", "--x=1"])
    assert argv == ["kube-apiserver", "--v=1", "--kubelet-preferred-address-types=InternalIP", "--x=1"]
    assert not controlplane.add_flags(argv, ["--x=1"])


def test_node_addon_builds_two_modules_and_its_key_covers_sub_packages(tmp_path: Path) -> None:
    assert addons.modules(["jobset", "node"]) == ["jobset", "node", "coredns"]
    source = build.find_source_dir()
    module = build.ADDON_MODULES["node"]
    key = build._plan(module, source).key
    assert "-X k8s.io/component-base/version.gitVersion=" in module.ldflags("v1.35.4")
    # A copy with a changed sub-package (pause/) gets another cache entry.
    copy = tmp_path / "node"
    for path in (source / "node").rglob("*"):
        if path.is_file():
            (copy / path.relative_to(source / "node")).parent.mkdir(parents=True, exist_ok=True)
            (copy / path.relative_to(source / "node")).write_bytes(path.read_bytes())
    assert build._plan(module, tmp_path).key == key
    (copy / "pause" / "main.go").write_text((copy / "pause" / "main.go").read_text() + "\n// changed\n")
    assert build._plan(module, tmp_path).key != key


def test_docker_archive_is_reproducible_and_names_its_layer(tmp_path: Path) -> None:
    files = {"/bin/tool": images.Entry(data=b"#!/bin/sh\n", mode=0o755), "/bin/alias": images.Entry(symlink="tool")}
    first = images.write_docker_archive(tmp_path / "a.tar", name="example.local/t:1", files=files, cmd=["/bin/tool"])
    second = images.write_docker_archive(tmp_path / "b.tar", name="example.local/t:1", files=files, cmd=["/bin/tool"])
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as archive:
        (manifest,) = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        assert manifest["RepoTags"] == ["example.local/t:1"]
        config = json.load(archive.extractfile(manifest["Config"]))  # type: ignore[arg-type]
        layer = archive.extractfile(manifest["Layers"][0]).read()  # type: ignore[union-attr]
    assert config["config"]["Cmd"] == ["/bin/tool"] and config["os"] == "linux"
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        members = {m.name: m for m in inner.getmembers()}
    assert members["bin"].isdir() and members["bin/tool"].mode == 0o755
    assert members["bin/alias"].issym() and members["bin/alias"].linkname == "tool"


def test_one_node_per_machine_claim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "OWNER_FILE", tmp_path / "run" / "node-owner")
    monkeypatch.setattr(node, "CONTAINERD_SOCKET", str(tmp_path / "no-containerd.sock"))
    released: list[Path] = []
    first, second = tmp_path / "a", tmp_path / "b"
    node.claim(first, alive=lambda d: True, release=released.append, say=lambda _m: None)
    assert node.owner() == first
    node.claim(first, alive=lambda d: True, release=released.append, say=lambda _m: None)  # again: fine
    with pytest.raises(node.NodeError, match=f"belongs to the cluster in {first}"):
        node.claim(second, alive=lambda d: d == first, release=released.append, say=lambda _m: None)
    assert node.owner() == first and released == []
    # A dead owner's leftovers are torn down, then the node changes hands.
    node.claim(second, alive=lambda d: False, release=released.append, say=lambda _m: None)
    assert node.owner() == second and released == [first]


def test_claim_survives_a_release_that_removes_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A dead owner's teardown may clean /run/ring-devcluster (older teardowns
    # removed it; a reboot empties /run): the new owner is still recorded.

    monkeypatch.setattr(node, "OWNER_FILE", tmp_path / "run" / "node-owner")
    monkeypatch.setattr(node, "CONTAINERD_SOCKET", str(tmp_path / "no-containerd.sock"))
    first, second = tmp_path / "a", tmp_path / "b"
    node.claim(first, alive=lambda d: True, release=lambda d: None, say=lambda _m: None)

    def release(dead: Path) -> None:
        shutil.rmtree(tmp_path / "run")

    node.claim(second, alive=lambda d: False, release=release, say=lambda _m: None)
    assert node.owner() == second


def test_second_network_is_a_second_conflist_containerd_attaches_with_the_status_plugin(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    pki.init_ca()
    ports = {key: 30000 + i for i, key in enumerate(addons.ADDONS["node"].ports)}
    binaries = {b: Path(f"/cache/{b}") for b in ("kubelet", "kube-proxy", "relay", "coredns", "pause")}
    node.configure(
        state_dir=tmp_path, server="https://127.0.0.1:6443", pki=pki, ports=ports, binaries=binaries,
        ip_family="dual", second_network=True,
    )  # fmt: skip
    home = tmp_path / "node"
    first, second = sorted((home / "cni" / "net.d").glob("*.conflist"))
    assert json.loads(first.read_text())["plugins"][0]["bridge"] == node.BRIDGE
    bridge, status = json.loads(second.read_text())["plugins"]
    assert bridge["bridge"] == node.BRIDGE2 and bridge["ipMasq"] is False and bridge["isDefaultGateway"] is False
    assert [r[0]["subnet"] for r in bridge["ipam"]["ranges"]] == [str(node.POD_CIDR2), str(node.POD_CIDR2_6)]
    assert "routes" not in bridge["ipam"]  # its subnet only: no Service range, no default route
    assert status["type"] == netstatus.PLUGIN_TYPE and status["network"] == node.SECOND_NETWORK
    assert Path(status["cert"]).is_file() and Path(status["key"]).is_file()
    # containerd loads both configurations (eth0, eth1) from a bin directory that also holds the status plugin.
    toml = (home / "containerd" / "config.toml").read_text()
    assert "max_conf_num = 2" in toml and f'bin_dir = "{home / "cni" / "bin"}"' in toml
    wrapper = home / "cni" / "bin" / netstatus.PLUGIN_TYPE
    assert wrapper.stat().st_mode & 0o111 and netstatus.__file__ in wrapper.read_text()
    # Without the option: one configuration, Debian's plugins.
    plain = tmp_path / "plain"
    _configure(plain, "dual")
    assert len(list((plain / "node" / "cni" / "net.d").glob("*.conflist"))) == 1
    assert "max_conf_num = 1" in (plain / "node" / "containerd" / "config.toml").read_text()


def test_multus_is_the_one_configuration_with_the_cluster_network_and_the_attachment_for_the_second_bridge(
    tmp_path: Path,
) -> None:
    pki = Pki(tmp_path / "pki")
    pki.init_ca()
    ports = {key: 30000 + i for i, key in enumerate(addons.ADDONS["node"].ports)}
    binaries = {b: Path(f"/cache/{b}") for b in ("kubelet", "kube-proxy", "relay", "coredns", "pause")}
    # The multus build's entry: the binary and its release's daemonset manifest (CRD among other objects).
    entry = tmp_path / "cache" / "multus"
    (entry / "assets" / "deployments").mkdir(parents=True)
    (entry / "multus").write_text("")
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "network-attachment-definitions.k8s.cni.cncf.io"}}  # fmt: skip
    other = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "multus"}}
    (entry / "assets" / "deployments" / "multus-daemonset.yml").write_text(yaml.safe_dump_all([other, crd]))
    with pytest.raises(node.NodeError, match="multus binary"):
        node.configure(
            state_dir=tmp_path / "none", server="https://127.0.0.1:6443", pki=pki, ports=ports, binaries=binaries,
            second_network=True, multus=True,
        )  # fmt: skip
    node.configure(
        state_dir=tmp_path, server="https://127.0.0.1:6443", pki=pki, ports=ports,
        binaries={**binaries, "multus": entry / "multus"}, ip_family="dual", second_network=True, multus=True,
    )  # fmt: skip
    home = tmp_path / "node"
    net_d = home / "cni" / "net.d"
    assert sorted(p.name for p in net_d.iterdir()) == [node.MULTUS_CONFIG, "10-ring-devcluster.conflist"]
    multus = json.loads((net_d / node.MULTUS_CONFIG).read_text())
    # The cluster network inline (a conflist by path loses its plugins' keys in Multus' DEL cache).
    assert multus["type"] == "multus" and "clusterNetwork" not in multus
    assert multus["delegates"] == [json.loads((net_d / "10-ring-devcluster.conflist").read_text())]
    assert "defaultNetworks" not in multus  # a pod asks for the attachment (k8s.v1.cni.cncf.io/networks)
    assert Path(multus["kubeconfig"]).is_file() and (Path(multus["binDir"]) / "multus").resolve() == entry / "multus"
    # containerd runs Multus alone; Multus runs the rest.
    assert "max_conf_num = 1" in (home / "containerd" / "config.toml").read_text()
    assert [d["metadata"]["name"] for d in node.multus_crds(tmp_path)] == [crd["metadata"]["name"]]
    ((path, nad),) = node.multus_objects(tmp_path)
    assert path == "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/ring-fast"
    (bridge,) = json.loads(nad["spec"]["config"])["plugins"]
    assert bridge["bridge"] == node.BRIDGE2
    assert [r[0]["subnet"] for r in bridge["ipam"]["ranges"]] == [str(node.POD_CIDR2), str(node.POD_CIDR2_6)]
    # A cluster without Multus has neither.
    assert node.multus_crds(tmp_path / "none") == [] and node.multus_objects(tmp_path / "none") == []


def test_network_status_plugin_writes_the_multus_format_from_the_bridge_result() -> None:
    config = {
        "cniVersion": "1.0.0", "network": node.SECOND_NETWORK, "defaultNetwork": "ring-devcluster",
        "prevResult": {
            "interfaces": [{"name": node.BRIDGE2, "mac": "aa:00:00:00:00:01"}, {"name": "veth1", "mac": "aa:00:00:00:00:02"},
                           {"name": "eth1", "mac": "aa:00:00:00:00:03", "sandbox": "/run/netns/cni-1"}],
            "ips": [{"interface": 2, "address": "10.245.0.7/24", "gateway": "10.245.0.1"},
                    {"interface": 2, "address": "fd72:696e:6700:245::7/64"}],
        },
    }  # fmt: skip
    entries = netstatus.network_status(
        config=config, ifname="eth1", default_ips=["10.244.0.7"], default_mac="aa:00:00:00:00:09"
    )
    # What ring-controller reads (model.network.parse_network_status): the attachment by name, its interface and IPs.
    from model.network import parse_network_status

    default, fast = parse_network_status(json.dumps(entries))
    assert (default.name, default.interface, default.ips, default.default) == (
        "ring-devcluster", "eth0", ("10.244.0.7",), True,
    )  # fmt: skip
    assert (fast.name, fast.interface, fast.ips, fast.default) == (
        node.SECOND_NETWORK, "eth1", ("10.245.0.7", "fd72:696e:6700:245::7"), False,
    )  # fmt: skip
    assert entries[1]["mac"] == "aa:00:00:00:00:03"
    # No address on the interface: ADD fails (the kubelet retries), nothing is written.
    code, out = netstatus.main(
        json.dumps({**config, "prevResult": {"interfaces": [], "ips": []}}),
        {
            "CNI_COMMAND": "ADD",
            "CNI_IFNAME": "eth1",
            "CNI_NETNS": "/nonexistent",
            "CNI_ARGS": "K8S_POD_NAMESPACE=a;K8S_POD_NAME=b",
        },
    )
    assert code == 1 and "no address on eth1" in json.loads(out)["msg"], out
    assert netstatus.main("", {"CNI_COMMAND": "DEL"}) == (0, "")
    code, out = netstatus.main("", {"CNI_COMMAND": "VERSION"})
    assert code == 0 and "1.0.0" in json.loads(out)["supportedVersions"]


def _node_with(conditions: list[dict[str, str]], taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"status": {"conditions": conditions}, "spec": {"taints": taints or []}}


def test_a_node_under_disk_pressure_is_not_ready_for_pods_and_says_why() -> None:
    ready = {"type": "Ready", "status": "True"}
    disk = {"type": "DiskPressure", "status": "True", "message": "ephemeral-storage below 2Gi"}
    assert node.pending(lambda _path: _node_with([ready, {**disk, "status": "False"}])) == []
    waiting = node.pending(lambda _path: _node_with([ready, disk]))
    assert waiting == [f"node/{node.NODE_NAME} (DiskPressure: ephemeral-storage below 2Gi)"]


def test_up_refuses_the_real_node_on_a_nearly_full_disk_naming_the_space(tmp_path: Path) -> None:
    node.check_disk(tmp_path / "not-yet" / "state", free=lambda _p: node.MIN_FREE_BYTES)  # exactly enough: fine
    with pytest.raises(node.NodeError, match=r"found 3\.3 GiB.*DiskPressure"):
        node.check_disk(tmp_path, free=lambda _p: int(3.3 * 1024**3))
