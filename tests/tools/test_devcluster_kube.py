"""``ring-devcluster --kube VERSION``: the release a value names and the wrapper go.mod generated for it.

Plain data: the release lists and go.mod excerpts are those the Go module
proxy served for k8s.io/kubernetes (trimmed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ringdevcluster import build, controlplane, kubeversions
from ringdevcluster.kubeversions import VersionError, newest_patch, normalise, staging_replaces, wrapper_go_mod
from ringdevcluster.pki import Pki

# `go list -m -versions k8s.io/kubernetes`, a slice of it (module path first).
LISTED = (
    "k8s.io/kubernetes v1.31.14 v1.32.0-alpha.1 v1.32.0-rc.0 v1.32.0 v1.32.2 v1.32.10 v1.32.13 "
    "v1.35.0 v1.35.4 v1.37.0 v1.37.2 v1.38.0-alpha.1 v1.38.0-beta.0"
).split()[1:]

# The head and replace block of v1.32.13's go.mod and of v1.37.2's (trimmed to the lines read).
GO_MOD_132 = """\
// This is a generated file. Do not edit directly.
module k8s.io/kubernetes

go 1.23.0

godebug default=go1.23

godebug winsymlink=0

require (
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apimachinery => ./staging/src/k8s.io/apimachinery
\tk8s.io/externaljwt => ./staging/src/k8s.io/externaljwt
)
"""
GO_MOD_137 = """\
module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apimachinery => ./staging/src/k8s.io/apimachinery
\tk8s.io/cri-streaming => ./staging/src/k8s.io/cri-streaming
\tk8s.io/externaljwt => ./staging/src/k8s.io/externaljwt
\tk8s.io/streaming => ./staging/src/k8s.io/streaming
)
"""


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1.32", (None, 32)),
        ("v1.37", (None, 37)),
        ("1.32.13", ("v1.32.13", 32)),
        ("v1.35.4", ("v1.35.4", 35)),
        (" 1.38.0-beta.0 ", ("v1.38.0-beta.0", 38)),
    ],
)
def test_a_kube_value_is_a_minor_or_a_full_version(spec: str, expected: tuple[str | None, int]) -> None:
    assert normalise(spec) == expected


@pytest.mark.parametrize("spec", ["latest", "2.1", "1", "1.32.x", "132", ""])
def test_anything_else_is_refused_with_the_forms_it_takes(spec: str) -> None:
    with pytest.raises(VersionError, match=r"1\.32\.13"):
        normalise(spec)


def test_a_minor_is_its_newest_patch_numerically_not_by_text() -> None:
    assert newest_patch(LISTED, 32) == "v1.32.13"  # not v1.32.2, which sorts last as text
    assert newest_patch(LISTED, 37) == "v1.37.2"
    assert newest_patch(LISTED, 31) == "v1.31.14"


def test_a_pre_release_counts_only_while_the_minor_has_no_release() -> None:
    assert newest_patch(LISTED, 38) == "v1.38.0-beta.0"
    assert newest_patch([*LISTED, "v1.38.0"], 38) == "v1.38.0"
    assert newest_patch(LISTED, 33) is None


def test_the_staging_list_is_each_releases_own() -> None:
    assert staging_replaces(GO_MOD_132) == ["k8s.io/api", "k8s.io/apimachinery", "k8s.io/externaljwt"]
    assert "k8s.io/cri-streaming" in staging_replaces(GO_MOD_137)
    assert "k8s.io/streaming" in staging_replaces(GO_MOD_137)


def test_the_wrapper_replaces_each_staging_module_by_the_published_release() -> None:
    text = wrapper_go_mod(name="kube", version="v1.32.13", upstream=GO_MOD_132)
    assert "module ringcontroller.local/devcluster/kube\n" in text
    assert "\ngo 1.23.0\n" in text  # the release's own go line
    assert "godebug default=go1.23" in text and "godebug winsymlink=0" in text
    assert "require k8s.io/kubernetes v1.32.13\n" in text
    for module in ("k8s.io/api", "k8s.io/apimachinery", "k8s.io/externaljwt"):
        assert f"\t{module} => {module} v0.32.13\n" in text
    assert "./staging" not in text
    assert build.module_version(text, "k8s.io/kubernetes") == "v1.32.13"
    newer = wrapper_go_mod(name="node", version="v1.37.2", upstream=GO_MOD_137)
    assert "\tk8s.io/cri-streaming => k8s.io/cri-streaming v0.37.2\n" in newer
    assert "\ngo 1.26.0\n" in newer


def test_a_go_mod_without_staging_replaces_is_refused() -> None:
    with pytest.raises(VersionError, match="replaces no staging module"):
        wrapper_go_mod(name="kube", version="v1.32.13", upstream="module k8s.io/kubernetes\n\ngo 1.23.0\n")


def test_a_newer_go_line_than_the_local_toolchain_switches_toolchains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOTOOLCHAIN", raising=False)
    monkeypatch.setattr(kubeversions, "local_go", lambda: "1.26.8")
    assert kubeversions.toolchain_env("module x\n\ngo 1.27.0\n", {})["GOTOOLCHAIN"] == "auto"
    assert "GOTOOLCHAIN" not in kubeversions.toolchain_env("module x\n\ngo 1.26.0\n", {})
    monkeypatch.setenv("GOTOOLCHAIN", "go1.27.3")  # the caller's choice stands
    assert "GOTOOLCHAIN" not in kubeversions.toolchain_env("module x\n\ngo 1.27.0\n", {})


def test_the_pinned_release_builds_from_the_repository(tmp_path: object) -> None:
    source = build.find_source_dir()
    pinned = build.module_version((source / "kube" / "go.mod").read_text(), "k8s.io/kubernetes")
    assert build.kube_source(pinned, source_root=source) == source
    assert build.kube_source(None, source_root=source) == source
    # The node's kubelet and kube-proxy follow the control plane's release.
    node = build.module_version((source / "node" / "go.mod").read_text(), "k8s.io/kubernetes")
    assert node == pinned


def test_a_staging_module_the_proxy_lacks_at_the_patch_takes_its_newest_earlier_patch() -> None:
    # What the proxy listed for k8s.io/endpointslice: no v0.32.10, no v0.32.13.
    listed = ["v0.31.9", "v0.32.9", "v0.32.11", "v0.32.12", "v0.33.1"]
    assert kubeversions.nearest_published("v1.32.13", listed) == "v0.32.12"
    assert kubeversions.nearest_published("v1.32.11", listed) == "v0.32.11"
    assert kubeversions.nearest_published("v1.32.10", listed) == "v0.32.9"
    assert kubeversions.nearest_published("v1.32.8", listed) is None  # nothing at or before the patch
    text = wrapper_go_mod(
        name="kube", version="v1.32.13", upstream=GO_MOD_132, substitutes={"k8s.io/externaljwt": "v0.32.12"}
    )
    assert "\tk8s.io/externaljwt => k8s.io/externaljwt v0.32.12\n" in text
    assert "\tk8s.io/api => k8s.io/api v0.32.13\n" in text
    assert "serves no k8s.io/externaljwt v0.32.13: v0.32.12 instead" in text


def test_the_download_ahead_lists_exactly_what_the_build_compiles() -> None:
    for module in [*build.MODULES, *build.ADDON_MODULES.values()]:
        argv = build._download_argv(module)
        built = module.build_args("v0.35.4" if module.name == "kubectl" else "v1.35.4", build.cache_dir())
        assert argv[:4] == ["go", "list", "-e", "-deps"]
        assert argv[-len(module.packages) :] == list(module.packages) == built[-len(module.packages) :]
        if module.tags:  # the same build tags, or another set of files is loaded
            assert argv[argv.index("-tags") + 1] == built[built.index("-tags") + 1]
        else:
            assert "-tags" not in argv


def test_a_bad_kube_value_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    from ringdevcluster import cli

    assert cli.main(["build", "--kube", "1.30.x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "ring-devcluster: error: --kube '1.30.x': expected a Kubernetes minor (1.32) or version (1.32.13, v1.32.13)"
    ]


def test_the_pinned_minor_needs_no_lookup_when_given_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("a full version needs no proxy look-up")

    monkeypatch.setattr(kubeversions, "_go", no_network)
    assert build.resolve_kube("1.35.4") == "v1.35.4"
    assert build.resolve_kube(None) is None


def test_dra_is_turned_on_before_1_34_and_left_at_its_defaults_from_then_on() -> None:
    for version in ("v1.32.13", "v1.33.7"):
        flags = kubeversions.release_flags(version)
        assert flags["kube-apiserver"] == [
            "--feature-gates=DynamicResourceAllocation=true,DRAResourceClaimDeviceStatus=true",
            "--runtime-config=resource.k8s.io/v1beta1=true",
        ]
        assert set(flags) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler"}
        assert all(f[0].startswith("--feature-gates=DynamicResourceAllocation=true") for f in flags.values())
    # GA from 1.34: naming a gate that a later release removed would stop the process.
    for version in (None, "v1.34.0", "v1.35.4", "v1.36.2"):
        assert kubeversions.release_flags(version) == {}


@pytest.mark.parametrize("version", ["v1.37.2", "1.37.0", "v1.38.0", "v1.38.0-rc.1"])
def test_from_1_37_the_beta_podgroup_api_is_served_and_its_gate_is_on(version: str) -> None:
    flags = kubeversions.release_flags(version)
    gates = "--feature-gates=GenericWorkload=true"
    assert flags == {
        "kube-apiserver": [gates, "--runtime-config=scheduling.k8s.io/v1beta1=true"],
        "kube-controller-manager": [gates],
        "kube-scheduler": [gates],
    }


def test_a_fresh_1_37_cluster_passes_the_release_flags(tmp_path: Path) -> None:
    binaries = {name: Path(f"/cache/x/{name}") for name in ("etcd", "kube-apiserver", "kube-controller-manager",
                                                            "kube-scheduler", "kwok")}  # fmt: skip
    setup = controlplane.configure(
        state_dir=tmp_path,
        server="https://127.0.0.1:1",
        pki=Pki(tmp_path / "pki"),
        ports={name: 20000 + i for i, name in enumerate(controlplane.PORTS)},
        binaries=binaries,
        kube="v1.37.2",
    )
    assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in setup.argv["kube-apiserver"]
    assert "--feature-gates=GenericWorkload=true" in setup.argv["kube-scheduler"]
