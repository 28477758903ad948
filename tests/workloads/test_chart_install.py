"""The Helm chart as operators use it: `helm install`, `upgrade`, `uninstall` on the real node.

The release runs in a namespace of its own (pinned to the real node by the
operator's placement annotations, Pod Security ``restricted``, as in
test_deployed_controller), scoped by ``watchNamespaces`` to the test's
namespace only, so it never writes other tests' jobs. Its names come from the
release (``chart-<hex>-ring-controller``), so it cannot collide with the
shipped manifests' ``ring-controller`` objects either, and its own
``labelKey``, so the specs it is credited with are its own. The image is the one
``build/image.sh --controller --import`` puts on the node.

Checked: install -> both replicas Ready on the real node and a leader; the
ServiceAccount may write ConfigMaps in the watched namespace and nowhere else;
a labelled job there gets its completed spec; `helm upgrade` with another log
format rolls the Deployment (new pods, console log lines) and the next job
still gets its spec; `helm uninstall` leaves no cluster-scoped object of the
release behind.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from ringdevcluster import Cluster, node
from tests.support import charts, nodejobs
from tests.support.deployed import IMAGE, completed_spec, controller_pods, create_workload, ready, wait_leader
from tests.support.kubehelp import create_namespace, delete_namespace, fresh_namespace_name, wait_for

pytestmark = pytest.mark.integration

#: The release's label key (the chart's labelKey): a cluster-wide controller of
#: another test (default key) cannot be the one that writes this test's specs.
LABEL_KEY = "chart-test.ring-controller.io/runtime"


def _helm(kubeconfig: Path, *args: str, check: bool = True) -> str:
    proc = charts.run([charts.tool("helm"), "--kubeconfig", kubeconfig, *args], check=check, timeout=400)
    return proc.stdout + proc.stderr


def _can(k8s: Any, user: str, verb: str, resource: str, namespace: str) -> bool:
    review = client.AuthorizationV1Api(k8s.api).create_subject_access_review(
        {"spec": {"user": user, "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace}}}
    )
    return bool(review.status.allowed)


def _all_ready(k8s: Any, namespace: str, count: int, where: Any = lambda _p: True) -> list[Any] | None:
    pods = controller_pods(k8s, namespace)
    return pods if len(pods) == count and all(ready(p) and where(p) for p in pods) else None


def _cluster_scoped_of(k8s: Any, release: str, fullname: str) -> list[str]:
    """Cluster-scoped objects that carry the release's instance label or its name prefix."""
    rbac = client.RbacAuthorizationV1Api(k8s.api)
    admission = client.AdmissionregistrationV1Api(k8s.api)
    found = []
    for kind, items in (
        ("ClusterRole", rbac.list_cluster_role().items),
        ("ClusterRoleBinding", rbac.list_cluster_role_binding().items),
        ("ValidatingAdmissionPolicy", admission.list_validating_admission_policy().items),
        ("ValidatingAdmissionPolicyBinding", admission.list_validating_admission_policy_binding().items),
    ):
        for item in items:
            labels = item.metadata.labels or {}
            if labels.get("app.kubernetes.io/instance") == release or item.metadata.name.startswith(fullname):
                found.append(f"{kind}/{item.metadata.name}")
    return found


def test_helm_install_upgrade_uninstall_on_the_real_node(
    k8s: Any, kubeconfig: Path, namespace: str, real_node: Cluster
) -> None:
    nodejobs.ensure_image(IMAGE, "--controller")
    release = f"chart-{secrets.token_hex(3)}"
    fullname = f"{release}-ring-controller"
    home = create_namespace(
        k8s,
        fresh_namespace_name("chart-release"),
        labels={"pod-security.kubernetes.io/enforce": "restricted"},
        annotations=node.namespace_placement(),
    )
    account = f"system:serviceaccount:{home}:{fullname}"
    installed = False
    try:
        started = time.monotonic()
        _helm(
            kubeconfig, "install", release, str(charts.CHART), "--namespace", home,
            "--set-json", f'watchNamespaces=["{namespace}"]', "--set", f"labelKey={LABEL_KEY}",
            "--wait", "--timeout", "4m",
        )  # fmt: skip
        installed = True
        pods = wait_for(lambda: _all_ready(k8s, home, 2), timeout=120, what="both replicas Ready")
        print(f"\nFIGURE helm install -> 2 replicas Ready: {time.monotonic() - started:.1f}s")
        assert {p.spec.node_name for p in pods} == {node.NODE_NAME}
        assert {p.spec.service_account_name for p in pods} == {fullname}
        names = {p.metadata.name for p in pods}
        wait_leader(k8s, home, names)
        # Namespace-scoped RBAC: ConfigMaps in the watched namespace only.
        assert _can(k8s, account, "create", "configmaps", namespace)
        assert not _can(k8s, account, "create", "configmaps", home)
        assert not _can(k8s, account, "list", "pods", "default")

        create_workload(k8s, namespace, "first", label_key=LABEL_KEY)
        wait_for(lambda: completed_spec(k8s, namespace, "first"), timeout=90, what="the release's first spec")

        generation = k8s.apps.read_namespaced_deployment(fullname, home).metadata.generation
        started = time.monotonic()
        _helm(
            kubeconfig, "upgrade", release, str(charts.CHART), "--namespace", home, "--reuse-values",
            "--set", "logFormat=console", "--wait", "--timeout", "4m",
        )  # fmt: skip

        def console(pod: Any) -> bool:
            return "--log-format=console" in pod.spec.containers[0].args and pod.metadata.name not in names

        rolled = wait_for(lambda: _all_ready(k8s, home, 2, console), timeout=180, what="the upgrade rolled out")
        print(f"FIGURE helm upgrade (log format) -> 2 new replicas Ready: {time.monotonic() - started:.1f}s")
        assert k8s.apps.read_namespaced_deployment(fullname, home).metadata.generation > generation
        log = k8s.core.read_namespaced_pod_log(rolled[0].metadata.name, home)
        lines = [line for line in log.splitlines() if line.strip()]
        assert lines and not any(line.lstrip().startswith("{") for line in lines), lines[:3]
        create_workload(k8s, namespace, "second", label_key=LABEL_KEY)
        wait_for(lambda: completed_spec(k8s, namespace, "second"), timeout=90, what="a spec after the upgrade")

        assert _cluster_scoped_of(k8s, release, fullname)  # the policy, its binding, the runtimes' ClusterRole...
        _helm(kubeconfig, "uninstall", release, "--namespace", home, "--wait", "--timeout", "3m")
        installed = False
        assert _cluster_scoped_of(k8s, release, fullname) == []
        rbac = client.RbacAuthorizationV1Api(k8s.api)
        assert [
            r.metadata.name for r in rbac.list_namespaced_role(namespace).items if r.metadata.name == fullname
        ] == []
        wait_for(lambda: not controller_pods(k8s, home), timeout=120, what="the release's pods gone")
    finally:
        if installed:
            _helm(kubeconfig, "uninstall", release, "--namespace", home, "--wait", check=False)
        delete_namespace(k8s, home)
