"""The networks members are reached on: IP family, hostNetwork ports, secondary networks (plain data).

Every rule of :mod:`model.network` through :func:`agent.decide.decide` and
:func:`agent.decide.explain`, and every output ``ring-launch`` derives from
the spec for IPv6 members, shared node IPs and secondary interfaces.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.decide import STATUS_INVALID, decide, explain
from agent.worker import _event_reason
from model.keys import (
    IP_FAMILY_ANNOTATION,
    NETWORK_ANNOTATION,
    NETWORK_CLAIM_ANNOTATION,
    NETWORK_STATUS_ANNOTATION,
    REGISTERED_ANNOTATION,
)
from model.network import (
    AddressRule,
    Reached,
    Unreached,
    claim_record,
    distinct_ports,
    parse_family,
    parse_network,
    parse_network_status,
    reach,
)
from model.pod import pod_record, with_claim_networks
from model.records import PodRecord, WorkloadRecord
from model.volcano import workload_record
from ranktable import frozen
from ranktable.clusterspec import ClusterSpec, SpecError, spec_from_json, spec_to_json
from ranktable.exports import member_env
from ranktable.hostfile import hostfile_text
from ranktable.launch.wait import Identity, Judge, Observation, Ready
from ranktable.netenv import network_env
from ranktable.registration import parse_registration, registration_value
from tests.support.factories import pod_template, volcano_job, volcano_pod
from tests.support.specs import make_spec

LABEL = "ring-controller.atlas"
Json = dict[str, Any]

#: A network-status annotation as Multus writes it (NPWG multi-net spec v1.2, 4.1.2):
#: the cluster network's entry (no interface name given by some CNIs) and one attachment.
#: Indented the way Multus indents it.
MULTUS_STATUS = """[{
    "name": "k8s-pod-network",
    "ips": [
        "10.244.0.7"
    ],
    "default": true,
    "dns": {}
},{
    "name": "ml/fast",
    "interface": "net1",
    "ips": [
        "192.168.50.%d"
    ],
    "mac": "2e:51:e6:31:96:%02x",
    "dns": {}
}]"""


def _job(
    tasks: list[tuple[str, int]], *, annotations: dict[str, str] | None = None, **kw: Any
) -> tuple[Json, WorkloadRecord]:
    raw = volcano_job("j", namespace="ml", tasks=tasks, uid="job-uid", **kw)
    raw["metadata"]["annotations"] = dict(annotations or {})
    return raw, workload_record(raw, label_key=LABEL)


def _pod(
    raw: Json,
    index: int,
    *,
    ips: tuple[str, ...],
    task: str = "worker",
    node: str = "n1",
    host_network: bool = False,
    annotations: dict[str, str] | None = None,
) -> PodRecord:
    pod = volcano_pod(
        raw,
        task=task,
        index=index,
        uid=f"uid-{task}-{index}",
        ip=ips[0],
        host_ip="10.0.0.1",
        phase="Running",
        node=node,
        annotations=annotations,
    )
    pod["status"]["podIPs"] = [{"ip": ip} for ip in ips]
    if host_network:
        pod["spec"]["hostNetwork"] = True
    return pod_record(pod)


# IP family ----------------------------------------------------------------------


def test_family_and_network_annotations_parse_or_say_why() -> None:
    assert parse_family("ipv6") == "IPv6" and parse_family(" IPv4 ") == "IPv4"
    with pytest.raises(ValueError, match="not an IP family"):
        parse_family("inet6")
    assert parse_network("fast", namespace="ml") == "ml/fast"
    assert parse_network("net/fast", namespace="ml") == "net/fast"
    for bad in ("a/b/c", "", "ml/", "ml/fa st"):
        with pytest.raises(ValueError, match="NAMESPACE/NAME"):
            parse_network(bad, namespace="ml")


def test_a_malformed_family_annotation_makes_the_job_invalid() -> None:
    raw, wl = _job([("worker", 1)], annotations={IP_FAMILY_ANNOTATION: "v6"})
    d = decide(wl, [_pod(raw, 0, ips=("127.1.0.1",))], previous=None)
    assert d.status == STATUS_INVALID and d.data is None
    assert [p.reason for p in d.problems] == ["invalid_workload"]
    assert IP_FAMILY_ANNOTATION in d.problems[0].message


@pytest.mark.parametrize(
    ("family", "want"), [("IPv6", ["fd00::11", "fd00::12"]), ("IPv4", ["127.1.0.11", "127.1.0.12"])]
)
def test_a_dual_stack_job_lists_the_family_it_asks_for(family: str, want: list[str]) -> None:
    raw, wl = _job([("worker", 2)], annotations={IP_FAMILY_ANNOTATION: family})
    pods = [_pod(raw, i, ips=(f"127.1.0.{11 + i}", f"fd00::{11 + i}")) for i in range(2)]
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "completed" and [m.ip for m in d.spec.members] == want
    assert d.data is not None and spec_from_json(d.data["cluster.json"]) == d.spec


def test_without_the_annotation_each_member_takes_its_primary_ip() -> None:
    raw, wl = _job([("worker", 2)])
    pods = [_pod(raw, i, ips=(f"fd00::{11 + i}", f"127.1.0.{11 + i}")) for i in range(2)]
    d = decide(wl, pods, previous=None)
    assert [m.ip for m in d.spec.members] == ["fd00::11", "fd00::12"]


def test_primary_ips_of_both_families_wait_for_the_annotation() -> None:
    raw, wl = _job([("worker", 2)])
    pods = [_pod(raw, 0, ips=("127.1.0.11",)), _pod(raw, 1, ips=("fd00::12",))]
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "initializing" and d.spec.members == () and d.data is not None
    assert [p.reason for p in d.problems] == ["mixed_ip_families"]
    assert "IPv4: j-worker-0; IPv6: j-worker-1" in d.problems[0].message
    assert _event_reason("mixed_ip_families") == "MixedIPFamilies"


def test_an_ipv4_only_member_of_an_ipv6_job_waits_with_the_reason() -> None:
    raw, wl = _job([("worker", 2)], annotations={IP_FAMILY_ANNOTATION: "IPv6"})
    pods = [_pod(raw, 0, ips=("127.1.0.11", "fd00::11")), _pod(raw, 1, ips=("127.1.0.12",))]
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "initializing" and d.ready == 1
    assert [p.reason for p in d.problems] == ["ip_family"]
    assert "pod j-worker-1 has no IPv6 address (its IPs: 127.1.0.12)" in d.problems[0].message
    e = explain(wl, pods, previous=None)
    assert [s.state for s in e.slots] == ["counting", "wrong_family"]
    assert _event_reason("ip_family") == "NoAddressOfFamily"


def test_a_spec_never_mixes_families() -> None:
    spec = make_spec([("worker", 2)])
    mixed = frozen.replace(spec, members=(spec.members[0], frozen.replace(spec.members[1], ip="fd00::2")))
    with pytest.raises(SpecError, match=r"members\[1\].ip: 'fd00::2' is of another IP family"):
        spec_to_json(mixed)


def test_self_registration_carries_every_ip_and_the_family_is_chosen_from_it() -> None:
    value = registration_value(ip="127.1.0.11", started="t", ips=("127.1.0.11", "fd00::11"))
    assert json.loads(value) == {"ip": "127.1.0.11", "ips": ["127.1.0.11", "fd00::11"], "started": "t"}
    assert "ips" not in json.loads(registration_value(ip="127.1.0.11", started="t", ips=("127.1.0.11",)))
    parsed = parse_registration(value)
    assert parsed is not None and parsed.other_ips == ("fd00::11",)
    with pytest.raises(ValueError, match="not an IP address"):
        parse_registration('{"ip": "127.1.0.1", "ips": ["127.1.0.1", "nope"]}')
    # A pod the kubelet has not reported yet, registered with both IPs, counts with its IPv6 address.
    raw, wl = _job(
        [("worker", 1)], annotations={IP_FAMILY_ANNOTATION: "IPv6", "ring-controller.io/self-register": "true"}
    )
    pod = volcano_pod(raw, task="worker", index=0, uid="u0", node="n1", annotations={REGISTERED_ANNOTATION: value})
    pod["status"] = {"phase": "Pending", "hostIP": "10.0.0.1"}
    d = decide(wl, [pod_record(pod)], previous=None)
    assert d.spec.status == "completed" and d.spec.members[0].ip == "fd00::11"


# Outputs for IPv6 members ----------------------------------------------------------


def _v6(spec: ClusterSpec) -> ClusterSpec:
    return frozen.replace(
        spec, members=tuple(frozen.replace(m, ip=f"fd00::{m.rank + 1}", port=2222) for m in spec.members)
    )


def test_every_output_brackets_ipv6_where_a_port_follows() -> None:
    spec = _v6(make_spec([("chief", 1), ("worker", 2)]))
    assert spec_from_json(spec_to_json(spec)) == spec
    env = member_env(spec, pod="job-worker-1", hostfile_dir="/tmp/h")
    tf = json.loads(env["TF_CONFIG"])
    assert tf["cluster"] == {"chief": ["[fd00::1]:2222"], "worker": ["[fd00::2]:2222", "[fd00::3]:2222"]}
    assert env["MASTER_ADDR"] == "fd00::1" and env["MASTER_PORT"] == "2222"  # torch: bare address, own port
    assert env["PET_MASTER_ADDR"] == "fd00::1" and env["PET_MASTER_PORT"] == "2222"
    assert env["JAX_COORDINATOR_ADDRESS"] == "[fd00::1]:2222"
    assert env["PADDLE_CURRENT_ENDPOINT"] == "[fd00::3]:2222"
    assert env["PADDLE_TRAINER_ENDPOINTS"] == "[fd00::1]:2222,[fd00::2]:2222,[fd00::3]:2222"
    assert env["MS_SCHED_HOST"] == "fd00::1" and env["MS_SCHED_PORT"] == "2222"
    # HCCL assumes IPv4; NCCL takes a dual-stack interface's first address, the IPv4 one: both are told.
    assert env["HCCL_SOCKET_FAMILY"] == env["NCCL_SOCKET_FAMILY"] == "AF_INET6"
    assert env["RING_IP"] == "fd00::3" and env["RING_PORT"] == "2222"
    assert hostfile_text(spec, flavor="openmpi") == "fd00::1 slots=1\nfd00::2 slots=1\nfd00::3 slots=1\n"
    assert hostfile_text(spec, flavor="mpich") == "[fd00::1]:1\n[fd00::2]:1\n[fd00::3]:1\n"


def test_ipv4_outputs_keep_their_text() -> None:
    spec = make_spec([("worker", 2)])
    env = member_env(spec, pod="job-worker-1")
    assert not {"HCCL_SOCKET_FAMILY", "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_IFNAME"} & set(env)
    assert hostfile_text(spec, flavor="mpich") == "127.1.0.1:1\n127.1.0.2:1\n"


def test_the_launcher_accepts_a_member_listed_by_its_other_family() -> None:
    spec = _v6(make_spec([("worker", 2)]))
    member = spec.members[1]
    text = spec_to_json(spec)
    # $POD_IP is the pod's IPv4 primary; the spec lists it by IPv6: not a stale spec.
    verdict = Judge(Identity(pod=member.pod, uid=member.uid, ip="127.1.0.2"), "cm").judge(
        Observation(cluster=text, hccl=None, final=True)
    )
    assert isinstance(verdict, Ready)
    # Of the same family, a different IP still means an earlier pod's spec.
    stale = Judge(Identity(pod=member.pod, uid=member.uid, ip="fd00::99"), "cm").judge(
        Observation(cluster=text, hccl=None, final=True)
    )
    assert isinstance(stale, str) and "whose ip is fd00::99" in stale


# hostNetwork ports ----------------------------------------------------------------


def test_host_network_members_on_one_node_get_distinct_ports() -> None:
    raw, wl = _job([("worker", 3)])
    pods = [
        _pod(raw, 0, ips=("10.0.0.1",), host_network=True),
        _pod(raw, 1, ips=("10.0.0.2",), host_network=True, node="n2"),
        _pod(raw, 2, ips=("10.0.0.1",), host_network=True),
    ]
    d = decide(wl, pods, previous=None)
    assert d.spec.status == "completed"
    assert [m.address for m in d.spec.members] == ["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.1:2223"]
    env = member_env(d.spec, pod="j-worker-2")
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"][2] == "10.0.0.1:2223"
    assert env["RING_PORT"] == "2223" and env["HCCL_IF_BASE_PORT"] == "60032"
    assert "HCCL_IF_BASE_PORT" not in member_env(d.spec, pod="j-worker-0")
    assert hostfile_text(d.spec) == "10.0.0.1 slots=2\n10.0.0.2 slots=1\n"  # MPI counts slots per host


def test_a_host_port_that_cannot_move_makes_the_job_invalid() -> None:
    template = pod_template(port=2222)
    raw, wl = _job([("worker", 2)], template=template)
    pods = [_pod(raw, i, ips=("10.0.0.1",), host_network=True) for i in range(2)]
    assert all(p.host_port for p in pods)
    d = decide(wl, pods, previous=None)
    assert d.status == STATUS_INVALID and d.data is None
    assert [p.reason for p in d.problems] == ["address_collision"]
    assert "j-worker-0 and j-worker-1 would both listen on 10.0.0.1:2222 (a hostPort" in d.problems[0].message
    assert _event_reason("address_collision") == "AddressCollision"


def test_pod_network_members_on_one_ip_are_refused_not_moved() -> None:
    raw, wl = _job([("worker", 2)])
    d = decide(wl, [_pod(raw, i, ips=("127.1.0.9",)) for i in range(2)], previous=None)
    assert d.status == STATUS_INVALID and [p.reason for p in d.problems] == ["address_collision"]


def test_distinct_ports_rules() -> None:
    assert distinct_ports([("a", "h", 2222, True), ("b", "h", 2222, True), ("c", "h", 2222, True)]) == (
        [2222, 2223, 2224],
        None,
    )
    ports, why = distinct_ports([("a", "h", 65535, True), ("b", "h", 65535, True)])
    assert why is not None and "past 65535" in why
    # A fixed port next to a moved one that lands on it.
    ports, why = distinct_ports([("a", "h", 2222, True), ("b", "h", 2223, False), ("c", "h", 2222, True)])
    assert ports == [2222, 2223, 2224] and why is None
    ports, why = distinct_ports([("a", "h", 2221, True), ("b", "h", 2222, False)])
    assert ports == [2221, 2222] and why is None
    ports, why = distinct_ports([("a", "h", 2222, False), ("b", "h", 2221, True)])
    assert why is not None and "pods a and b would both listen on h:2222" in why
    _, why = distinct_ports([("a", "fd00::1", 2222, False), ("b", "fd00::1", 2222, False)])
    assert why is not None and "[fd00::1]:2222" in why


# Secondary networks ---------------------------------------------------------------------


def _attached(raw: Json, index: int, **kw: Any) -> PodRecord:
    status = MULTUS_STATUS % (11 + index, 11 + index)
    return _pod(raw, index, ips=(f"10.244.0.{11 + index}",), annotations={NETWORK_STATUS_ANNOTATION: status}, **kw)


def test_multus_network_status_parses_as_written() -> None:
    found = parse_network_status(MULTUS_STATUS % (5, 5))
    assert [(a.name, a.interface, a.ips, a.default) for a in found] == [
        ("k8s-pod-network", "", ("10.244.0.7",), True),
        ("ml/fast", "net1", ("192.168.50.5",), False),
    ]
    assert parse_network_status('[{"name": "x", "ips": ["10.9.8.1/24"]}]')[0].ips == ("10.9.8.1",)
    for bad, why in [
        ("{", "not JSON"),
        ("{}", "not a JSON list"),
        ('[{"ips": []}]', "no string 'name'"),
        ('[{"name": "x", "ips": "10.0.0.1"}]', "not a list of strings"),
        ('[{"name": "x", "ips": ["10.0.0.300"]}]', "not an IP address"),
        ('[{"name": "x", "interface": 1}]', "'interface' is not a string"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_network_status(bad)


def test_a_network_job_lists_each_members_attachment_address_and_interface() -> None:
    raw, wl = _job([("worker", 2)], annotations={NETWORK_ANNOTATION: "fast"})
    assert wl.address == AddressRule(network="ml/fast")
    d = decide(wl, [_attached(raw, 0), _attached(raw, 1)], previous=None)
    assert d.spec.status == "completed"
    assert [(m.ip, m.interface) for m in d.spec.members] == [("192.168.50.11", "net1"), ("192.168.50.12", "net1")]
    assert d.data is not None
    written = json.loads(d.data["cluster.json"])["members"]
    assert [m["interface"] for m in written] == ["net1", "net1"]
    assert spec_from_json(d.data["cluster.json"]) == d.spec
    env = member_env(d.spec, pod="j-worker-1")
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == ["192.168.50.11:2222", "192.168.50.12:2222"]
    assert env["MASTER_ADDR"] == "192.168.50.11"
    assert {k: env[k] for k in env if "IFNAME" in k or "IFACE" in k or "if_include" in k or k == "HCCL_IF_IP"} == {
        "NCCL_SOCKET_IFNAME": "=net1",
        "GLOO_SOCKET_IFNAME": "net1",
        "TP_SOCKET_IFNAME": "net1",
        "HCCL_SOCKET_IFNAME": "=net1",
        "HCCL_IF_IP": "192.168.50.12",
        "OMPI_MCA_btl_tcp_if_include": "net1",
        "OMPI_MCA_oob_tcp_if_include": "net1",
        "HYDRA_IFACE": "net1",
        "I_MPI_HYDRA_IFACE": "net1",
    }
    assert env["HCCL_SOCKET_FAMILY"] == env["NCCL_SOCKET_FAMILY"] == "AF_INET"


def test_a_member_without_the_attachment_waits_and_nothing_points_elsewhere() -> None:
    raw, wl = _job([("worker", 2)], annotations={NETWORK_ANNOTATION: "ml/fast"})
    plain = _pod(
        raw, 1, ips=("10.244.0.12",), annotations={NETWORK_STATUS_ANNOTATION: MULTUS_STATUS.split(",{")[0] + "]"}
    )
    d = decide(wl, [_attached(raw, 0), plain], previous=None)
    assert d.spec.status == "initializing" and d.spec.members == ()
    assert [p.reason for p in d.problems] == ["network_missing"]
    assert "pod j-worker-1 is not attached to network ml/fast" in d.problems[0].message
    assert "its networks: k8s-pod-network" in d.problems[0].message
    assert [s.state for s in explain(wl, [_attached(raw, 0), plain], previous=None).slots] == ["counting", "no_network"]
    assert _event_reason("network_missing") == "NetworkNotAttached"


def test_no_annotation_or_a_malformed_one_waits_with_the_reason() -> None:
    raw, wl = _job([("worker", 1)], annotations={NETWORK_ANNOTATION: "ml/fast"})
    absent = decide(wl, [_pod(raw, 0, ips=("10.244.0.11",))], previous=None)
    assert absent.spec.status == "initializing" and [p.reason for p in absent.problems] == ["network_missing"]
    assert "has no annotation k8s.v1.cni.cncf.io/network-status" in absent.problems[0].message
    bad = _pod(raw, 0, ips=("10.244.0.11",), annotations={NETWORK_STATUS_ANNOTATION: "[{"})
    d = decide(wl, [bad], previous=None)
    assert d.spec.status == "initializing" and [p.reason for p in d.problems] == ["invalid_network_status"]
    assert [s.state for s in explain(wl, [bad], previous=None).slots] == ["invalid_network"]
    assert _event_reason("invalid_network_status") == "InvalidNetworkStatus"


def test_network_and_family_together_pick_that_familys_address_on_the_attachment() -> None:
    status = json.dumps([{"name": "ml/fast", "interface": "net1", "ips": ["192.168.50.1", "fd50::1"]}])
    rule = AddressRule(family="IPv6", network="ml/fast")
    assert reach(pod="p", ips=("10.0.0.1",), network_status=status, rule=rule) == Reached("fd50::1", "net1")
    v4only = json.dumps([{"name": "ml/fast", "interface": "net1", "ips": ["192.168.50.1"]}])
    found = reach(pod="p", ips=("10.0.0.1",), network_status=v4only, rule=rule)
    assert isinstance(found, Unreached) and found.reason == "network_missing"
    assert "has no IPv6 address on network ml/fast (interface net1, IPs: 192.168.50.1)" in found.message
    no_ipam = json.dumps([{"name": "ml/fast", "interface": "net1"}])
    found = reach(pod="p", ips=("10.0.0.1",), network_status=no_ipam, rule=AddressRule(network="ml/fast"))
    assert isinstance(found, Unreached) and "IPs: none" in found.message


def test_an_interface_name_is_checked_in_the_spec() -> None:
    spec = make_spec([("worker", 1)])
    for bad in ("a" * 16, "net/1", "net 1", "=net1", "a,b"):
        broken = frozen.replace(spec, members=(frozen.replace(spec.members[0], interface=bad),))
        with pytest.raises(SpecError, match="interface"):
            spec_to_json(broken)
    good = frozen.replace(spec, members=(frozen.replace(spec.members[0], interface="net1"),))
    assert spec_from_json(spec_to_json(good)).members[0].interface == "net1"
    assert network_env(good, pod=good.members[0].pod)["GLOO_SOCKET_IFNAME"] == "net1"


# DRA-allocated NICs ---------------------------------------------------------------------------


def _claim(*, ips: list[str], interface: str = "eth1", name: str = "nic-claim-0") -> Json:
    """A ResourceClaim as a DRA driver leaves it: allocated, its device's networkData reported."""
    device = {"driver": "nic.example.com", "pool": "node-a", "device": "nic-0"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "status": {
            "allocation": {"devices": {"results": [{**device, "request": "nic"}]}},
            "devices": [
                {
                    **device,
                    "networkData": {"interfaceName": interface, "ips": ips, "hardwareAddress": "aa:bb:cc:00:00:01"},
                }
            ],
        },
    }


def _claiming(raw: Json, index: int, *, template: bool = False, **kw: Any) -> PodRecord:
    pod = volcano_pod(raw, task="worker", index=index, uid=f"u{index}", ip=f"10.244.0.{11 + index}", phase="Running")
    claim = f"nic-claim-{index}"
    if template:
        pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic-template"}]
        pod["status"]["resourceClaimStatuses"] = [{"name": "nic", "resourceClaimName": claim}]
    else:
        pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimName": claim}]
    return pod_record(pod)


def test_a_claim_job_lists_each_members_nic_address_and_interface() -> None:
    raw, wl = _job([("worker", 2)], annotations={NETWORK_CLAIM_ANNOTATION: "nic"})
    assert wl.address == AddressRule(claim="nic")
    claims = {
        f"ml/nic-claim-{i}": claim_record(_claim(ips=[f"192.0.2.{5 + i}/24", f"2001:db8::{5 + i}/64"]))
        for i in range(2)
    }
    pods = [_claiming(raw, 0), _claiming(raw, 1, template=True)]
    assert pods[1].claims == (("nic", "nic-claim-1"),)
    waiting = decide(wl, pods, previous=None)  # the claims' statuses not known yet
    assert waiting.spec.status == "initializing" and {p.reason for p in waiting.problems} == {"network_missing"}
    assert "ResourceClaim nic-claim-0 reports no address yet" in waiting.problems[0].message
    d = decide(wl, [with_claim_networks(p, claims.get) for p in pods], previous=None)
    assert d.spec.status == "completed"
    assert [(m.ip, m.interface) for m in d.spec.members] == [("192.0.2.5", "eth1"), ("192.0.2.6", "eth1")]
    env = member_env(d.spec, pod="j-worker-1")
    assert env["NCCL_SOCKET_IFNAME"] == "=eth1" and env["HCCL_IF_IP"] == "192.0.2.6"
    raw6, wl6 = _job([("worker", 2)], annotations={NETWORK_CLAIM_ANNOTATION: "nic", IP_FAMILY_ANNOTATION: "IPv6"})
    d6 = decide(wl6, [with_claim_networks(_claiming(raw6, i), claims.get) for i in range(2)], previous=None)
    assert [m.ip for m in d6.spec.members] == ["2001:db8::5", "2001:db8::6"]


def test_a_claim_without_the_pod_reference_or_with_bad_network_data_waits() -> None:
    raw, wl = _job([("worker", 1)], annotations={NETWORK_CLAIM_ANNOTATION: "fastnic"})
    d = decide(wl, [_claiming(raw, 0)], previous=None)
    assert "has no resource claim 'fastnic' (spec.resourceClaims)" in d.problems[0].message
    bad = claim_record(_claim(ips=["192.0.2.300/24"]))
    assert isinstance(bad, str) and "not an address in CIDR notation" in bad
    raw, wl = _job([("worker", 1)], annotations={NETWORK_CLAIM_ANNOTATION: "nic"})
    d = decide(wl, [with_claim_networks(_claiming(raw, 0), {"ml/nic-claim-0": bad}.get)], previous=None)
    assert d.spec.status == "initializing" and [p.reason for p in d.problems] == ["invalid_network_status"]
    assert claim_record({"status": {"devices": [{"driver": "gpu.example.com", "pool": "p", "device": "g0"}]}}) is None


def test_the_two_network_annotations_are_exclusive() -> None:
    raw, wl = _job([("worker", 1)], annotations={NETWORK_CLAIM_ANNOTATION: "nic", NETWORK_ANNOTATION: "fast"})
    assert wl.address_error is not None and "choose one network" in wl.address_error
    d = decide(wl, [_claiming(raw, 0)], previous=None)
    assert d.status == STATUS_INVALID and [p.reason for p in d.problems] == ["invalid_workload"]


def test_kubectl_ring_describe_shows_the_spec_address_bracketed_with_its_interface() -> None:
    from ringcontroller.kubectl_ring import render
    from ringcontroller.kubectl_ring.jobs import job_view

    raw, wl = _job([("worker", 2)], annotations={IP_FAMILY_ANNOTATION: "IPv6"})
    pods = [_pod(raw, i, ips=(f"127.1.0.{11 + i}", f"fd00::{11 + i}")) for i in range(2)]
    d = decide(wl, pods, previous=None)
    assert d.data is not None
    cm = {
        "metadata": {"name": "rings-config-j", "namespace": "ml", "labels": {"ring-controller.io/managed": "true"}},
        "data": d.data,
    }
    text = render.describe_text(job_view(wl, pods, {}, cm), label_key=LABEL)
    assert "[fd00::11]:2222" in text and "[fd00::12]:2222" in text
    spec = make_spec([("worker", 1)])
    attached = frozen.replace(spec, members=(frozen.replace(spec.members[0], interface="net1"),))
    assert attached.members[0].address + " on net1" == "127.1.0.1:2222 on net1"
