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
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from ranktable.clusterspec import REGISTERED_ANNOTATION
from tests.support.clients import REPO
from tests.support.kubehelp import wait_for

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


def _core_as(devcluster: Any, k8s: Any, namespace: str, account: str, pod: Any | None) -> client.CoreV1Api:
    """A client holding a token of ``account``, bound to ``pod`` (as the kubelet mounts it) or to nothing."""
    spec: Json = {"expirationSeconds": 600}
    if pod is not None:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid}
    token = k8s.core.create_namespaced_service_account_token(account, namespace, {"spec": spec}).status.token
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
