"""The dev cluster's API server audit log: the policy the chaos runs rely on, and its flags."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ringdevcluster.controlplane import AUDIT_POLICY, AUDIT_POLICY_FILE, PORTS, argv
from ringdevcluster.pki import Pki

pytestmark = pytest.mark.tools


def test_the_policy_records_configmap_writes_and_lease_bodies_but_not_node_leases() -> None:
    policy = yaml.safe_load(AUDIT_POLICY)
    assert (policy["apiVersion"], policy["kind"]) == ("audit.k8s.io/v1", "Policy")
    rules = policy["rules"]
    assert rules[0] == {"level": "None", "namespaces": ["kube-node-lease"]}  # kwok's 4 nodes renew every 10 s
    leases, configmaps, rest = rules[1], rules[2], rules[3:]
    assert leases["level"] == "Request" and leases["resources"] == [
        {"group": "coordination.k8s.io", "resources": ["leases"]}
    ]  # the request body says which holder a write sets
    assert configmaps["level"] == "Metadata" and set(configmaps["verbs"]) == {"create", "update", "patch", "delete"}
    assert rest == [{"level": "None"}]


def test_the_api_server_is_started_with_the_policy_and_a_log(tmp_path: Path) -> None:
    binaries = {name: Path(f"/bin/{name}") for name in ("etcd", "kube-apiserver", "kube-controller-manager",
                                                        "kube-scheduler", "kwok")}  # fmt: skip
    ports = dict.fromkeys(PORTS, 1)
    apiserver = argv(state_dir=tmp_path, binaries=binaries, ports=ports, pki=Pki(tmp_path / "pki"))["kube-apiserver"]
    assert f"--audit-policy-file={tmp_path / AUDIT_POLICY_FILE}" in apiserver
    assert f"--audit-log-path={tmp_path / 'logs' / 'audit.log'}" in apiserver
