"""Pure helpers of ring-devcluster: node layout, build cache keys, process identity."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from ringdevcluster import build, cli, harness, kwok, process

pytestmark = pytest.mark.tools


@pytest.mark.parametrize(
    "index, name, cidr, host_ip",
    [
        pytest.param(0, "kwok-node-0", "127.1.0.0/24", "127.2.0.1", id="first"),
        pytest.param(3, "kwok-node-3", "127.1.3.0/24", "127.2.0.4", id="fourth"),
        pytest.param(249, "kwok-node-249", "127.1.249.0/24", "127.2.0.250", id="last"),
    ],
)
def test_node_layout(index: int, name: str, cidr: str, host_ip: str) -> None:
    assert kwok.node_name(index) == name
    assert kwok.node_pod_cidr(index) == cidr
    assert kwok.node_host_ip(index) == host_ip
    manifest = kwok.node_manifest(index)
    assert manifest["spec"]["podCIDRs"] == [cidr]
    assert manifest["metadata"]["labels"]["type"] == "kwok"
    assert manifest["metadata"]["annotations"][kwok.HOST_IP_ANNOTATION] == host_ip


def test_node_layout_keeps_host_ips_out_of_every_pod_cidr() -> None:
    cidrs = [ipaddress.ip_network(kwok.node_pod_cidr(i)) for i in range(kwok.MAX_NODES)]
    assert len(set(cidrs)) == kwok.MAX_NODES
    assert all(c.subnet_of(kwok.POD_NETWORK) for c in cidrs)  # type: ignore[arg-type]
    for i in range(kwok.MAX_NODES):
        assert ipaddress.ip_address(kwok.node_host_ip(i)) not in kwok.POD_NETWORK
        assert ipaddress.ip_address(kwok.node_host_ip(i)).is_loopback


@pytest.mark.parametrize("index", [-1, kwok.MAX_NODES], ids=["negative", "too-many"])
def test_node_index_out_of_range(index: int) -> None:
    with pytest.raises(ValueError, match=f"^node index {index} out of range 0..{kwok.MAX_NODES - 1}$"):
        kwok.node_pod_cidr(index)


def test_kwok_stages_parse_and_cover_node_and_pod_lifecycle() -> None:
    stages = list(yaml.safe_load_all(kwok.STAGES))
    kinds = sorted({s["spec"]["resourceRef"]["kind"] for s in stages})
    assert kinds == ["Node", "Pod"]
    assert any(s["spec"]["next"].get("delete") for s in stages)
    assert all(s["kind"] == "Stage" for s in stages)


GO_MOD = """module x

go 1.25.0

require k8s.io/kubernetes v1.35.4

require (
\tk8s.io/api v0.35.4 // indirect
)

replace k8s.io/api => k8s.io/api v0.35.4
"""


def test_module_version_reads_require_lines() -> None:
    assert build.module_version(GO_MOD, "k8s.io/kubernetes") == "v1.35.4"
    assert build.module_version(GO_MOD, "k8s.io/api") == "v0.35.4"
    with pytest.raises(build.BuildError, match="^go.mod does not require go.etcd.io/etcd/server/v3$"):
        build.module_version(GO_MOD, "go.etcd.io/etcd/server/v3")


def test_cache_key_changes_with_sources_and_flags() -> None:
    files = {"go.mod": b"a", "go.sum": b"b"}
    base = build.cache_key(files=files, argv=["go", "build", "-trimpath"])
    assert base == build.cache_key(files=dict(reversed(list(files.items()))), argv=["go", "build", "-trimpath"])
    assert base != build.cache_key(files={**files, "go.sum": b"c"}, argv=["go", "build", "-trimpath"])
    assert base != build.cache_key(files={**files, "main.go": b""}, argv=["go", "build", "-trimpath"])
    assert base != build.cache_key(files=files, argv=["go", "build"])


def test_kube_ldflags_stamp_the_release() -> None:
    kube = next(m for m in build.MODULES if m.name == "kube")
    flags = kube.ldflags("v1.35.4")
    assert "version.gitVersion=v1.35.4" in flags
    assert "version.gitMajor=1" in flags and "version.gitMinor=35" in flags
    etcd = next(m for m in build.MODULES if m.name == "etcd")
    assert etcd.ldflags("v3.6.16") == "-s -w"


def test_repository_wrapper_modules_are_found_and_versioned() -> None:
    source = build.find_source_dir()
    for module in build.MODULES:
        text = (source / module.name / "go.mod").read_text()
        assert build.module_version(text, module.requirement).startswith("v")


def test_replace_with_directory_repoints_one_pinned_replace() -> None:
    go_mod = (
        "module x\n\nrequire volcano.sh/volcano v1.15.1\n\nreplace (\n"
        "\tk8s.io/api => k8s.io/api v0.35.3\n\tvolcano.sh/apis => volcano.sh/apis v1.14.0\n)\n"
    )
    text, version = build.replace_with_directory(go_mod, "volcano.sh/apis", Path("/c/src/volcano/volcano.sh/apis"))
    assert version == "v1.14.0"
    assert text == go_mod.replace(
        "volcano.sh/apis => volcano.sh/apis v1.14.0", "volcano.sh/apis => /c/src/volcano/volcano.sh/apis"
    )
    single = "module x\n\nreplace volcano.sh/apis => volcano.sh/apis v1.14.0\n"
    assert (
        build.replace_with_directory(single, "volcano.sh/apis", Path("/d"))[0]
        == "module x\n\nreplace volcano.sh/apis => /d\n"
    )
    with pytest.raises(build.BuildError, match="^go.mod must replace volcano.sh/apis by a published version"):
        build.replace_with_directory("module x\n\nrequire volcano.sh/apis v1.14.0\n", "volcano.sh/apis", Path("/d"))


def test_patched_wrapper_pins_its_dependency_and_hashes_the_patch(tmp_path: Path) -> None:
    volcano = build.ADDON_MODULES["volcano"]
    assert volcano.patches, "volcano.sh/apis is patched (the proxy serves no release after v1.14.0)"
    source = build.find_source_dir()
    go_mod = (source / "volcano" / "go.mod").read_text()
    for patch in volcano.patches:
        build.replace_with_directory(go_mod, patch.module, tmp_path)  # raises if not pinned by a replace
        for _, name in patch.files:
            assert (source / "volcano" / name).is_file()
    copy = tmp_path / "devcluster"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("ringdevcluster", "__pycache__"))
    key = build._plan(volcano, copy).key
    overlay = copy / "volcano" / volcano.patches[0].files[0][1]
    overlay.write_text(overlay.read_text() + "\n// changed\n")
    assert build._plan(volcano, copy).key != key


def test_cache_dir_honours_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RING_DEVCLUSTER_CACHE", str(tmp_path / "c"))
    assert build.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("RING_DEVCLUSTER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.cache_dir() == tmp_path / "ring-devcluster"


def test_pid_record_identifies_a_process_by_start_time_and_binary() -> None:
    pid = os.getpid()
    start = process.proc_start_time(pid)
    assert start is not None
    argv0 = process.proc_argv0(pid)
    assert argv0 is not None
    assert process.PidRecord(pid=pid, start_time=start, binary=argv0).alive()
    # A recycled pid (other start time) or another program is not ours.
    assert not process.PidRecord(pid=pid, start_time=start + 1, binary=argv0).alive()
    assert not process.PidRecord(pid=pid, start_time=start, binary=sys.executable + "-other").alive()


def test_helm_is_stamped_with_the_kubernetes_minor_of_its_k8s_modules() -> None:
    go_mod = (build.find_source_dir() / "helm" / "go.mod").read_text()
    client_go = build.module_version(go_mod, "k8s.io/client-go")
    assert client_go.startswith(f"v0.{build.HELM_KUBE_MINOR}."), (client_go, build.HELM_KUBE_MINOR)
    flags = build.ADDON_MODULES["helm"].ldflags("v3.22.0")
    assert f"chartutil.k8sVersionMinor={build.HELM_KUBE_MINOR}" in flags
    assert "internal/version.version=v3.22.0" in flags


def test_tools_are_wrapper_modules_and_unknown_ones_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    source = build.find_source_dir()
    for name in build.TOOL_MODULES:
        assert (source / name / "go.mod").is_file() and name in build.ADDON_MODULES
    with pytest.raises(build.BuildError, match="unknown tool"):
        build.ensure_tools(["kustomize"])
    with pytest.raises(SystemExit, match="^2$"):
        cli.main(["tools", "kustomize"])
    assert "unknown tool 'kustomize'; choose from helm, kubectl" in capsys.readouterr().err


def test_apply_retries_only_trainers_refusal_of_a_runtime_its_cache_lacks() -> None:
    # The one refusal harness.apply waits out: Trainer's webhook has not seen
    # the runtime applied just before the TrainJob. Any other error is raised.
    def refusal(status: int, message: str) -> ApiException:
        e = ApiException(status=status, reason="Forbidden")
        e.body = json.dumps({"kind": "Status", "status": "Failure", "message": message})
        return e

    not_seen = 'admission webhook "validate.trainjob.trainer.kubeflow.org" denied the request: spec.runtimeRef: ClusterTrainingRuntime.trainer.kubeflow.org "gang" not found: specified clusterTrainingRuntime must be created before the TrainJob is created'
    assert harness._runtime_not_seen_yet(refusal(403, not_seen))
    assert not harness._runtime_not_seen_yet(refusal(403, "pods is forbidden: exceeded quota"))
    assert not harness._runtime_not_seen_yet(refusal(422, not_seen))
