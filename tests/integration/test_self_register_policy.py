"""The launcher's self-registration grant, judged by the real API server.

``build/launcher-rbac.yaml`` gives the training pods' ServiceAccount
(``ring-launch``) ``pods/patch`` through RBAC and takes nearly all of it back
through a ValidatingAdmissionPolicy: a launcher may set one annotation,
``ring-controller.io/registered``, on the pod whose bound token it presents,
and nothing else. Tokens are minted by the TokenRequest API bound to a pod, as
the kubelet's projected token is, so the API server puts the pod's name and
uid into ``userInfo.extra`` exactly as it does for a real launcher.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from ranktable.clusterspec import REGISTERED_ANNOTATION
from tests.support import launcherpyz
from tests.support.clients import REPO
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubectlring import token_kubeconfig
from tests.support.kubehelp import create_pods, create_volcano_job, wait_for
from tests.support.launcherapi import tf_config_of

pytestmark = pytest.mark.integration

Json = dict[str, Any]
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _manifests() -> list[Json]:
    with (REPO / "build" / "launcher-rbac.yaml").open() as f:
        return [d for d in yaml.safe_load_all(f) if d]


def _status(call: Callable[[], Any]) -> int:
    try:
        call()
    except ApiException as e:
        return int(e.status)
    return 200


def _unique(doc: Json, suffix: str) -> Json:
    """Cluster-scoped objects renamed so parallel runs cannot collide; the policy itself unchanged."""
    doc = json.loads(json.dumps(doc))
    doc["metadata"]["name"] = f"{doc['metadata']['name']}-{suffix}"
    if doc["kind"] == "ValidatingAdmissionPolicyBinding":
        doc["spec"]["policyName"] = f"{doc['spec']['policyName']}-{suffix}"
    return doc


@pytest.fixture
def launcher_grant(k8s: Any, namespace: str) -> Iterator[str]:
    """The file applied as a user would: its policy once, its account, Role and binding in ``namespace``."""
    admission = client.AdmissionregistrationV1Api(k8s.api)
    suffix = secrets.token_hex(3)
    created: list[Json] = []
    try:
        for doc in _manifests():
            kind = doc["kind"]
            if kind == "ValidatingAdmissionPolicy":
                doc = _unique(doc, suffix)
                admission.create_validating_admission_policy(doc)
                created.append(doc)
            elif kind == "ValidatingAdmissionPolicyBinding":
                doc = _unique(doc, suffix)
                admission.create_validating_admission_policy_binding(doc)
                created.append(doc)
            elif kind == "ServiceAccount":
                k8s.core.create_namespaced_service_account(namespace, doc)
            elif kind == "Role":
                k8s.rbac.create_namespaced_role(namespace, doc)
            elif kind == "RoleBinding":
                k8s.rbac.create_namespaced_role_binding(namespace, doc)
            else:
                raise AssertionError(f"unexpected {kind} in launcher-rbac.yaml")
        yield "ring-launch"
    finally:
        for doc in created:
            delete = (
                admission.delete_validating_admission_policy
                if doc["kind"] == "ValidatingAdmissionPolicy"
                else admission.delete_validating_admission_policy_binding
            )
            try:
                delete(doc["metadata"]["name"])
            except ApiException as e:
                if e.status != 404:
                    raise


def _pod(k8s: Any, namespace: str, name: str, account: str) -> Any:
    return k8s.core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": {"app": "t"}, "annotations": {"keep": "me"}},
            "spec": {
                "serviceAccountName": account,
                "automountServiceAccountToken": False,
                # No node will run it: the policy judges the object, not a container.
                "nodeSelector": {"ring-controller.test/none": "x"},
                "containers": [{"name": "c", "image": "x"}],
            },
        },
    )


def _token(k8s: Any, namespace: str, account: str, pod: Any | None) -> str:
    """A token of ``account``, bound to ``pod`` (as the kubelet mounts it) or to nothing."""
    spec: Json = {"expirationSeconds": 600}
    if pod is not None:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid}
    return str(k8s.core.create_namespaced_service_account_token(account, namespace, {"spec": spec}).status.token)


def _core_as(devcluster: Any, k8s: Any, namespace: str, account: str, pod: Any | None) -> client.CoreV1Api:
    """A client holding a token of ``account``, bound to ``pod`` (as the kubelet mounts it) or to nothing."""
    token = _token(k8s, namespace, account, pod)
    conf = client.Configuration()
    conf.host = devcluster.server
    conf.ssl_ca_cert = str(devcluster.ca_cert)
    conf.api_key = {"authorization": f"Bearer {token}"}
    return client.CoreV1Api(client.ApiClient(conf))


def test_a_launcher_may_register_on_its_own_pod_and_change_nothing_else(
    k8s: Any, devcluster: Any, namespace: str, launcher_grant: str
) -> None:
    account = launcher_grant
    own = _pod(k8s, namespace, "worker-0", account)
    other = _pod(k8s, namespace, "worker-1", account)
    as_own = _core_as(devcluster, k8s, namespace, account, own)
    as_other = _core_as(devcluster, k8s, namespace, account, other)
    as_unbound = _core_as(devcluster, k8s, namespace, account, None)

    def register(core: client.CoreV1Api, pod: str, value: str = '{"ip":"10.4.0.7"}', **extra: Any) -> int:
        body: Json = {"metadata": {"annotations": {REGISTERED_ANNOTATION: value}}}
        for k, v in extra.items():
            body.setdefault("metadata", {})[k] = v
        return _status(lambda: core.patch_namespaced_pod(pod, namespace, body))

    # The policy is in force once the API server denies a dry-run label change by the account.
    wait_for(
        lambda: (
            _status(
                lambda: as_own.patch_namespaced_pod(
                    "worker-0", namespace, {"metadata": {"labels": {"x": "y"}}}, dry_run="All"
                )
            )
            == 403
        ),
        what="the ValidatingAdmissionPolicy in force",
    )

    assert register(as_own, "worker-0") == 200
    seen = k8s.core.read_namespaced_pod("worker-0", namespace).metadata.annotations
    assert seen == {"keep": "me", REGISTERED_ANNOTATION: '{"ip":"10.4.0.7"}'}

    # Another pod, with this pod's token; this pod with the other pod's token; a token bound to no pod.
    assert register(as_own, "worker-1") == 403
    assert register(as_other, "worker-0", '{"ip":"10.4.0.99"}') == 403
    assert register(as_unbound, "worker-0", '{"ip":"10.4.0.99"}') == 403
    # Every other change to its own pod.

    def patch(body: Json) -> int:
        return _status(lambda: as_own.patch_namespaced_pod("worker-0", namespace, body))

    assert patch({"metadata": {"labels": {"x": "y"}}}) == 403
    assert patch({"metadata": {"annotations": {"other": "y"}}}) == 403
    assert patch({"metadata": {"annotations": {"keep": None}}}) == 403
    assert patch({"metadata": {"annotations": {REGISTERED_ANNOTATION: "{}", "other": "y"}}}) == 403
    assert patch({"metadata": {"annotations": {REGISTERED_ANNOTATION: "x" * 257}}}) == 403
    assert patch({"metadata": {"annotations": {"ring-controller.io/epoch": "7"}}}) == 403
    assert patch({"metadata": {"finalizers": ["example.com/hold"]}}) == 403
    assert patch({"spec": {"activeDeadlineSeconds": 5}}) == 403
    assert (
        _status(lambda: as_own.patch_namespaced_pod_status("worker-0", namespace, {"status": {"phase": "Failed"}}))
        == 403
    )
    # RBAC grants no delete, and reading other objects stays forbidden.
    assert _status(lambda: as_own.delete_namespaced_pod("worker-1", namespace)) == 403
    assert _status(lambda: as_own.list_namespaced_secret(namespace)) == 403

    after = k8s.core.read_namespaced_pod("worker-0", namespace)
    assert after.metadata.annotations == {"keep": "me", REGISTERED_ANNOTATION: '{"ip":"10.4.0.7"}'}
    assert after.metadata.labels == {"app": "t"} and after.spec.active_deadline_seconds is None
    assert not after.metadata.finalizers
    assert k8s.core.read_namespaced_pod("worker-1", namespace).metadata.annotations == {"keep": "me"}
    # A second registration (a restarted launcher) replaces the first.
    assert register(as_own, "worker-0", '{"ip":"10.4.0.8"}') == 200
    assert (
        k8s.core.read_namespaced_pod("worker-0", namespace).metadata.annotations[REGISTERED_ANNOTATION]
        == '{"ip":"10.4.0.8"}'
    )


def test_without_the_policy_the_grant_would_be_wide_open(
    k8s: Any, devcluster: Any, namespace: str, launcher_grant: str
) -> None:
    """The guard: the Role alone lets a launcher rewrite any pod's labels; the denials above are the policy's."""
    account = launcher_grant
    _pod(k8s, namespace, "worker-1", account)
    # Same RBAC, another account name: the policy's match condition does not cover it.
    k8s.core.create_namespaced_service_account(namespace, {"metadata": {"name": "unguarded"}})
    k8s.rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "unguarded"},
            "subjects": [{"kind": "ServiceAccount", "name": "unguarded"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ring-launch"},
        },
    )
    own = _pod(k8s, namespace, "worker-u", "unguarded")
    as_unguarded = _core_as(devcluster, k8s, namespace, "unguarded", own)
    wait_for(
        lambda: (
            _status(
                lambda: as_unguarded.patch_namespaced_pod(
                    "worker-1", namespace, {"metadata": {"labels": {"x": "y"}}}, dry_run="All"
                )
            )
            == 200
        ),
        what="the RoleBinding in force",
    )
    assert (
        _status(lambda: as_unguarded.patch_namespaced_pod("worker-1", namespace, {"metadata": {"labels": {"x": "y"}}}))
        == 200
    )


# -- end to end: the one-file launcher registers, the controller counts it ------------------------

REGISTERED_IP = "127.1.201.2"


def _job_with_a_pending_member(k8s: Any, namespace: str, name: str, node: str, account: str) -> str:
    template = pod_template(port=3000)
    template["spec"]["serviceAccountName"] = account
    job = create_volcano_job(k8s, namespace, volcano_job(name, tasks=[("worker", 2)], templates={"worker": template}))
    create_pods(k8s, job, [("worker", 0)])
    (pod,) = create_pods(k8s, job, [("worker", 1)], node=node)
    pending = str(pod["metadata"]["name"])
    # As the node's kubelet reports a pod whose containers are starting: Pending, the node's address known.
    k8s.core.patch_namespaced_pod_status(pending, namespace, {"status": {"phase": "Pending", "hostIP": "10.0.0.77"}})
    return pending


def _launcher(pyz: Path, config: Path, namespace: str, pod: str, configmap: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable, "-I", "-S", str(pyz), "--from-api", "--register", "--kubeconfig", str(config),
            "--namespace", namespace, "--configmap", configmap, "--timeout", "60", "--print", "json",
        ],
        env={"PATH": os.environ["PATH"], "POD_NAME": pod, "POD_IP": REGISTERED_IP},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_the_one_file_launcher_registers_and_gets_its_spec_before_the_kubelet_reports_running(
    k8s: Any,
    devcluster: Any,
    kubeconfig: Path,
    namespace: str,
    launcher_grant: str,
    idle_node: str,
    registering_controller: ControllerProcess,
    tmp_path: Path,
) -> None:
    pending = _job_with_a_pending_member(k8s, namespace, "e2e", idle_node, launcher_grant)
    token = _token(k8s, namespace, launcher_grant, k8s.core.read_namespaced_pod(pending, namespace))
    config = token_kubeconfig(kubeconfig, token, tmp_path / "launcher.kubeconfig")
    pyz = launcherpyz.build(tmp_path / "ring-launch.pyz")
    proc = _launcher(pyz, config, namespace, pending, "rings-config-e2e")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert f"registered on pod {pending} at {REGISTERED_IP}" in err
    cluster = tf_config_of(out)["cluster"]["worker"]
    assert cluster[1] == f"{REGISTERED_IP}:3000"
    # The spec came while the kubelet (here: nobody) still reports the pod Pending.
    assert k8s.core.read_namespaced_pod(pending, namespace).status.phase == "Pending"


def test_without_the_grant_the_launcher_says_so_once_and_waits_for_the_kubelet(
    k8s: Any,
    kubeconfig: Path,
    namespace: str,
    idle_node: str,
    registering_controller: ControllerProcess,
    tmp_path: Path,
) -> None:
    # The default account may read the spec but not patch pods.
    k8s.rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
        },
    )
    k8s.rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        },
    )
    pending = _job_with_a_pending_member(k8s, namespace, "nogrant", idle_node, "default")
    wait_for(
        lambda: _status(lambda: k8s.core.read_namespaced_service_account("default", namespace)) == 200,
        what="default ServiceAccount",
    )
    token = _token(k8s, namespace, "default", k8s.core.read_namespaced_pod(pending, namespace))
    config = token_kubeconfig(kubeconfig, token, tmp_path / "launcher.kubeconfig")
    pyz = launcherpyz.build(tmp_path / "ring-launch.pyz")
    proc = _launcher(pyz, config, namespace, pending, "rings-config-nogrant")
    assert proc.stderr is not None
    said: list[str] = []
    for line in proc.stderr:  # refused, then waiting on the initializing spec
        said.append(line)
        if "waiting: spec initializing" in line:
            break
    else:
        pytest.fail(f"the launcher ended before it waited (exit {proc.wait()}): {''.join(said)}")
    assert [line for line in said if "self-registration refused (403" in line], said
    # The kubelet reports it Running: the job starts as it would without registration.
    k8s.core.patch_namespaced_pod_status(
        pending, namespace, {"status": {"phase": "Running", "podIP": REGISTERED_IP, "podIPs": [{"ip": REGISTERED_IP}]}}
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert tf_config_of(out)["cluster"]["worker"][1] == f"{REGISTERED_IP}:3000"
    assert sum("self-registration refused" in line for line in [*said, *err.splitlines()]) == 1


#: Runs :func:`ranktable.launch.earlyreg.start` from the one-file launcher (argv[1]) as its entry does, says which
#: heavy modules are loaded once the PATCH is sent (http.client and ssl are: the PATCH goes out through them),
#: waits for the test's go, then reads the API server's answer.
EARLY_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ranktable.launch import earlyreg
HEAVY = ("dataclasses", "inspect", "ranktable.launch.launcher", "ranktable.clusterspec")
early = earlyreg.start(sys.argv[2:])
print(json.dumps({"sent": early is not None, "loaded": [m for m in HEAVY if m in sys.modules]}), flush=True)
sys.stdin.readline()
early.answer()
print(json.dumps({"answered": True, "kept": early.client._conn is not None}), flush=True)
"""


def test_the_one_file_launcher_registers_before_it_loads_the_spec_code(
    k8s: Any, kubeconfig: Path, namespace: str, launcher_grant: str, tmp_path: Path
) -> None:
    pod = _pod(k8s, namespace, "worker-0", launcher_grant)
    config = token_kubeconfig(kubeconfig, _token(k8s, namespace, launcher_grant, pod), tmp_path / "launcher.kubeconfig")
    pyz = launcherpyz.build(tmp_path / "ring-launch.pyz")
    argv = ["--from-api", "--register", "--kubeconfig", str(config), "--namespace", namespace]
    argv += ["--configmap", "rings-config-x", "--print", "json"]
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", EARLY_PROBE, str(pyz), *argv],
        env={"PATH": os.environ["PATH"], "POD_NAME": "worker-0", "POD_IP": REGISTERED_IP},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert json.loads(proc.stdout.readline() or "{}") == {"sent": True, "loaded": []}

        # The API server has the registration while the launcher has not even read the answer.
        def registered() -> str:
            notes = k8s.core.read_namespaced_pod("worker-0", namespace).metadata.annotations or {}
            return str(notes.get(REGISTERED_ANNOTATION, ""))

        wait_for(lambda: REGISTERED_IP in registered(), what="the early registration on the pod")
        assert json.loads(registered())["ip"] == REGISTERED_IP
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline() or "{}") == {"answered": True, "kept": True}
    finally:
        proc.kill()
        proc.wait()
