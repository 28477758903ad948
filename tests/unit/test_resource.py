"""One :class:`~ringcontroller.resource.Resource` for the daemon and ``kubectl ring``: the URL paths."""

from __future__ import annotations

import pytest

from model.kinds import JOBSET
from ringcontroller import kube
from ringcontroller.kubectl_ring import api
from ringcontroller.resource import CONFIGMAPS, LEASES, PODS, RUNTIMES, VOLCANO_JOBS, Resource, of_kind


@pytest.mark.parametrize(
    ("resource", "namespace", "name", "path", "label"),
    [
        (PODS, None, None, "/api/v1/pods", "pods"),
        (PODS, "", None, "/api/v1/pods", "pods"),
        (PODS, "ns1", None, "/api/v1/namespaces/ns1/pods", "pods"),
        (CONFIGMAPS, "ns1", "cm", "/api/v1/namespaces/ns1/configmaps/cm", "configmaps"),
        (VOLCANO_JOBS, None, None, "/apis/batch.volcano.sh/v1alpha1/jobs", "jobs.batch.volcano.sh"),
        (VOLCANO_JOBS, "a", "b", "/apis/batch.volcano.sh/v1alpha1/namespaces/a/jobs/b", "jobs.batch.volcano.sh"),
        (
            LEASES,
            "kube-system",
            "x",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x",
            "leases.coordination.k8s.io",
        ),
        (
            RUNTIMES,
            "ignored",
            "torch",
            "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch",
            "clustertrainingruntimes.trainer.kubeflow.org",
        ),
        (CONFIGMAPS, "a/b", "c?d=e#f", "/api/v1/namespaces/a%2Fb/configmaps/c%3Fd%3De%23f", "configmaps"),
        (PODS, "ns", "../../secrets/x", "/api/v1/namespaces/ns/pods/..%2F..%2Fsecrets%2Fx", "pods"),
        (PODS, "ns", "a b%", "/api/v1/namespaces/ns/pods/a%20b%25", "pods"),
    ],
    ids=[
        "core-all",
        "core-empty-namespace-is-all",
        "core-ns",
        "core-object",
        "crd-all",
        "crd-object",
        "lease",
        "cluster-scoped-ignores-namespace",
        "quoted-slash-query-fragment",
        "quoted-dot-segments",
        "quoted-space-percent",
    ],
)
def test_resource_paths(resource: Resource, namespace: str | None, name: str | None, path: str, label: str) -> None:
    assert resource.path(namespace, name) == path
    assert str(resource) == label


def test_the_daemon_and_the_plugin_share_one_resource_type() -> None:
    assert kube.Resource is api.Resource is Resource
    assert (kube.PODS, kube.CONFIGMAPS) == (api.PODS, api.CONFIGMAPS) == (PODS, CONFIGMAPS)


def test_a_kinds_resource_is_read_from_its_row() -> None:
    assert of_kind(JOBSET).path("ns", "j") == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/j"
