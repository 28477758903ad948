"""The Kueue addon's wiring, on assets laid out as Kueue v0.19's module source lays them out.

What the API server is given: the CRDs upstream's kustomization gives a
conversion webhook call Kueue by URL with the cluster CA, the others keep no
conversion; of Kueue's admission webhooks only those of its own kinds, of
JobSet and of TrainJob are registered (its pod webhooks would stand in front
of every pod of the cluster); its configuration names the integrations run.
The cluster itself is tested in tests/kueue (opt-in).
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from ringdevcluster import addons
from ringdevcluster.pki import Pki

pytestmark = pytest.mark.tools

_KUSTOMIZATION = """\
resources:
- bases/kueue.x-k8s.io_workloads.yaml
- bases/kueue.x-k8s.io_resourceflavors.yaml
patches:
- path: patches/webhook_in_workloads.yaml
#- path: patches/webhook_in_resourceflavors.yaml
"""


def _crd(name: str, spec: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": spec,
    }


def _patch(name: str) -> str:
    return yaml.safe_dump(_crd(name, {"conversion": {"strategy": "Webhook"}}))


def _hook(name: str, path: str) -> dict[str, object]:
    return {"name": name, "clientConfig": {"service": {"name": "webhook-service", "path": path}}, "rules": []}


@pytest.fixture
def assets(tmp_path: Path) -> dict[str, Path]:
    """A fake cache entry of the kueue module: binary path -> its directory holds ``assets/``."""
    root = tmp_path / "kueue-v0.19.2-x"
    crd = root / "assets/config/components/crd"
    (crd / "bases").mkdir(parents=True)
    (crd / "patches").mkdir()
    (crd / "kustomization.yaml").write_text(_KUSTOMIZATION)
    for plural in ("workloads", "resourceflavors"):
        name = f"{plural}.kueue.x-k8s.io"
        (crd / "bases" / f"kueue.x-k8s.io_{plural}.yaml").write_text(
            yaml.safe_dump(_crd(name, {"group": "kueue.x-k8s.io"}))
        )
        (crd / "patches" / f"webhook_in_{plural}.yaml").write_text(_patch(name))
    hooks = root / "assets/config/components/webhook"
    hooks.mkdir(parents=True)
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            _hook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset"),
            _hook("mpod.kb.io", "/mutate--v1-pod"),
            _hook("mrayjob.kb.io", "/mutate-ray-io-v1-rayjob"),
            _hook("mtrainjob.kb.io", "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"),
            _hook("mworkload.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-workload"),
        ],
    }
    (hooks / "manifests.yaml").write_text(yaml.safe_dump(mutating))
    (root / "kueue").write_text("")
    return {"kueue": root / "kueue"}


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.crt"
    path.write_bytes(b"-----BEGIN CERTIFICATE-----\nfake\n")
    return path


def test_the_crds_upstream_converts_call_the_webhook_by_url(assets: dict[str, Path], ca: Path) -> None:
    docs = {
        d["metadata"]["name"]: d
        for d in addons.crd_documents(["kueue"], binaries=assets, ports={"kueue-webhook": 20123}, ca_cert=ca)
    }
    conversion = docs["workloads.kueue.x-k8s.io"]["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["clientConfig"] == {
        "url": "https://127.0.0.1:20123/convert",
        "caBundle": base64.b64encode(ca.read_bytes()).decode(),
    }
    # its patch is commented out upstream: no conversion webhook
    assert docs["resourceflavors.kueue.x-k8s.io"]["spec"] == {"group": "kueue.x-k8s.io"}


def test_only_the_webhooks_of_kueues_kinds_jobset_and_trainjob_are_registered(
    assets: dict[str, Path], ca: Path
) -> None:
    (path, config), *rest = addons.objects("kueue", ports={"kueue-webhook": 20123}, binaries=assets, ca_cert=ca)
    assert rest == []
    assert path.endswith("/mutatingwebhookconfigurations/kueue-mutating-webhook-configuration")
    assert [h["name"] for h in config["webhooks"]] == ["mjobset.kb.io", "mtrainjob.kb.io", "mworkload.kb.io"]
    assert {h["clientConfig"]["url"].split("/", 3)[2] for h in config["webhooks"]} == {"127.0.0.1:20123"}


def test_the_configuration_runs_the_integrations_without_certificate_rotation(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    pki.init_ca()
    ports = {"kueue-health": 20124, "kueue-webhook": 20123}
    setup = addons.configure(
        "kueue", state_dir=tmp_path, server="https://127.0.0.1:1", pki=pki, ports=ports,
        binaries={"kueue": Path("/cache/kueue")},
    )  # fmt: skip
    (argv,) = setup.argv.values()
    config = yaml.safe_load((tmp_path / "addons/kueue/config.yaml").read_text())
    assert f"--config={tmp_path / 'addons/kueue/config.yaml'}" in argv
    assert config["integrations"]["frameworks"] == list(addons.KUEUE_FRAMEWORKS)
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"]["host"] == "127.0.0.1" and config["webhook"]["port"] == 20123
    assert (Path(config["webhook"]["certDir"]) / "tls.crt").is_file()
    assert addons.expand(["kueue"]) == ["jobset", "kueue"]
