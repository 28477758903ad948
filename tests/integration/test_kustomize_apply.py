"""`kubectl apply -k` of the kustomize base, through an overlay with the usual knobs, on the real API server.

Server-side dry run (``--dry-run=server``): the API server admits, defaults
and validates every object (the CEL of the pod-writes policy compiles, the
policy kinds are accepted as cluster-scoped, the Deployment passes the
namespace's Pod Security level) without keeping any, so nothing collides with
the shipped manifests other tests apply.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import charts

pytestmark = pytest.mark.integration


def test_apply_k_of_an_overlay_is_admitted(k8s: Any, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = Path(os.path.relpath(charts.KUSTOMIZE_BASE, overlay))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [str(base)],
                "namespace": namespace,  # exists: the dry run of its namespaced objects needs it
                "images": [{"name": "ring-controller", "newTag": "0.1.0"}],
                "transformers": [str(base / "kustomize" / "fence")],
            }
        )
    )
    argv = [
        charts.tool("kubectl"),
        "--kubeconfig",
        kubeconfig,
        "apply",
        "-k",
        overlay,
        "--server-side",
        "--force-conflicts",
    ]
    out = charts.run([*argv, "--dry-run=server", "-o", "yaml"]).stdout
    docs = charts.documents(out)
    items = docs[0]["items"] if docs and docs[0].get("kind") == "List" else docs
    applied = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in items}
    assert ("Deployment", namespace, "ring-controller") in applied
    assert ("ValidatingAdmissionPolicy", "", "ring-controller-pod-writes") in applied
    assert ("ClusterRoleBinding", "", "ring-controller") in applied
    (policy,) = [d for d in items if d["kind"] == "ValidatingAdmissionPolicy"]
    assert f"system:serviceaccount:{namespace}:ring-controller" in policy["spec"]["matchConditions"][0]["expression"]
    # A dry run keeps nothing.
    assert k8s.apps.list_namespaced_deployment(namespace).items == []
