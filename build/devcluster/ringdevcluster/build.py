"""Build and cache the control-plane binaries from the Go module proxy.

Kubernetes, etcd and kwok publish no release downloads this machine can reach,
so the binaries are compiled from source fetched through the Go module proxy.
Each component has a tiny wrapper module under ``build/devcluster/<module>`` in
the repository (``kube``, ``etcd``, ``kwok``); its ``go.mod`` pins the release
and, for Kubernetes, replaces every staging module by its published ``v0.X.Y``.
The optional components (:data:`ADDON_MODULES`: the workload controllers
``jobset``, ``volcano``, ``trainer``, ``lws``, the queueing controller ``kueue``; the
real node's ``node`` and ``coredns``) are wrapper modules of the same kind, built only when a cluster asks for them
(``ring-devcluster up --with ...``). Their manifests
that the harness installs (CRDs, webhook definitions) are copied from the very
module source that was compiled into ``<entry>/assets/`` (``Module.assets``),
so binaries and manifests always come from the same release and ``up`` needs
no Go toolchain once the cache is filled.

A cold build of the Kubernetes binaries takes many minutes on two cores, so:

* binaries are cached OUTSIDE the work tree, in
  ``$RING_DEVCLUSTER_CACHE`` (default ``$XDG_CACHE_HOME/ring-devcluster`` or
  ``~/.cache/ring-devcluster``), under ``bin/<module>-<version>-<key>/`` where
  ``key`` hashes the wrapper module's files (``go.mod``, ``go.sum``, ``*.go``, those of sub-packages too)
  and the build flags. Same sources, same flags: nothing is rebuilt, and ``go``
  is not even needed. A cache entry appears by an atomic rename, so a killed
  build never leaves a half-written entry behind;
* the ``go build`` command lines are fixed (the same flags every time), which
  keeps Go's own build cache hot across cache-key changes;
* modules are built one after the other (the machine has two cores; ``go``
  parallelises inside one build) and progress is printed while they run;
* the Go modules a build needs are downloaded before its first compile
  (``go build`` loads every package first). So while one module compiles, a
  background ``go list -deps`` (at ``nice 19``) downloads those of the next
  ones (:func:`prefetch`); ``ring-devcluster build --download-only`` does only
  that, for ``build/test.sh`` to run beside the first builds (on a fresh
  machine every module is downloaded, and ``kube``'s are the most).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ringdevcluster import kubeversions

__all__ = [
    "ADDON_MODULES",
    "BuildError",
    "Module",
    "MODULES",
    "Patch",
    "TOOL_MODULES",
    "binary_paths",
    "cache_dir",
    "cache_key",
    "ensure_binaries",
    "download",
    "ensure_tools",
    "prefetch",
    "find_source_dir",
    "resolve_kube",
    "kube_source",
    "module_version",
    "modules_for",
    "replace_with_directory",
]

# The Kubernetes release is stamped into the binaries (``--version``, the
# apiserver's /version), which otherwise report v0.0.0 when built from modules.
_KUBE_VERSION_PKG = "k8s.io/component-base/version"


#: The minor of the k8s.io modules (v0.MINOR.x) in build/devcluster/helm/go.mod:
#: the Kubernetes version `helm template` assumes without a cluster.
HELM_KUBE_MINOR = 37


class BuildError(RuntimeError):
    """A binary could not be built or located; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Patch:
    """Files added to a dependency the Go module proxy serves only at an older release.

    The wrapper's ``go.mod`` replaces ``module`` by a published version
    (``module => module vX.Y.Z``), which ``go mod tidy`` and ``go list`` use
    as they are. For the build only, that release is copied out of the module
    cache into ``<cache>/src/<wrapper>/<module>`` (a fixed path, so Go's build
    cache stays valid), ``files`` (``{path in the module: file in the wrapper
    directory}``) are added, and ``go build -modfile`` reads a copy of
    ``go.mod`` whose replace points at that directory. ``go build -overlay``
    cannot do this: it refuses files under GOMODCACHE.
    """

    module: str
    files: tuple[tuple[str, str], ...]


def _kube_stamp(version: str) -> list[str]:
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+.*", version)
    if match is None:
        raise BuildError(f"cannot parse Kubernetes version {version!r}")
    return [
        f"-X {_KUBE_VERSION_PKG}.gitVersion={version}",
        f"-X {_KUBE_VERSION_PKG}.gitMajor={match.group(1)}",
        f"-X {_KUBE_VERSION_PKG}.gitMinor={match.group(2)}",
    ]


def _kubectl_stamp(version: str) -> list[str]:
    # k8s.io/kubectl vX.Y.Z is Kubernetes v1.Y.Z: stamp that, as a release kubectl reports it.
    match = re.fullmatch(r"v0\.(\d+)\.(\d+)", version)
    if match is None:
        raise BuildError(f"cannot parse k8s.io/kubectl version {version!r}")
    return [
        f"-X {_KUBE_VERSION_PKG}.gitVersion=v1.{match.group(1)}.{match.group(2)}",
        f"-X {_KUBE_VERSION_PKG}.gitMajor=1",
        f"-X {_KUBE_VERSION_PKG}.gitMinor={match.group(1)}",
    ]


def _helm_stamp(version: str) -> list[str]:
    # Otherwise `helm version` says only the minor line built into the source,
    # and `helm template`/`lint` assume Kubernetes 1.20 (as upstream's
    # Makefile does, the version of the k8s.io modules Helm is built with).
    flags = [f"-X helm.sh/helm/v3/internal/version.version={version}"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={HELM_KUBE_MINOR}"]
    return flags


def _prometheus_stamp(version: str) -> list[str]:
    # Else `prometheus --version` and /api/v1/status/buildinfo say "".
    return [f"-X github.com/prometheus/common/version.Version={version}"]


@dataclasses.dataclass(frozen=True)
class Module:
    """One wrapper Go module and the binaries it produces.

    ``requirement`` is the module path whose version (read from ``go.mod``)
    names the cache entry; ``packages`` are passed to ``go build``;
    ``binaries`` are the file names ``go build -o DIR/`` leaves in DIR;
    ``assets`` are glob patterns, relative to the source of ``requirement``,
    of files copied into ``<entry>/assets/`` (same relative paths);
    ``cold_minutes`` is the rough cold build time on 2 cores, for progress (rounded
    up from a fresh machine's `.ci/run` on 2026-12-03, Go's build cache shared);
    ``patches`` add files to a dependency (see :class:`Patch`);
    ``tags`` are Go build tags (``go build -tags``), e.g. to leave out parts
    of a large program the dev cluster does not use.
    """

    name: str
    requirement: str
    packages: tuple[str, ...]
    binaries: tuple[str, ...]
    assets: tuple[str, ...] = ()
    cold_minutes: int = 5
    patches: tuple[Patch, ...] = ()
    tags: tuple[str, ...] = ()
    #: The ``-X`` flags that stamp the release into the binaries, from the version.
    stamp: Callable[[str], list[str]] | None = None
    #: For one package whose directory names it poorly (``sigs.k8s.io/lws/cmd``):
    #: the file name of its binary (``go build -o DIR/NAME``); ``binaries`` names it too.
    output: str = ""

    def ldflags(self, version: str) -> str:
        """The ``-ldflags`` value for this module at ``version``."""
        return " ".join(["-s", "-w", *(self.stamp(version) if self.stamp else ())])

    def build_args(self, version: str, out_dir: Path) -> list[str]:
        """The exact ``go build`` argv (run inside the module directory)."""
        return [
            "go",
            "build",
            "-v",
            "-trimpath",
            "-ldflags",
            self.ldflags(version),
            *(["-tags", ",".join(self.tags)] if self.tags else []),
            "-o",
            f"{out_dir}/{self.output}",
            *self.packages,
        ]


#: The control plane proper; always built.
MODULES: tuple[Module, ...] = (
    Module(name="etcd", requirement="go.etcd.io/etcd/server/v3", packages=(".",), binaries=("etcd",), cold_minutes=1),
    Module(
        name="kwok",
        requirement="sigs.k8s.io/kwok",
        packages=("sigs.k8s.io/kwok/cmd/kwok",),
        binaries=("kwok",),
        cold_minutes=2,
    ),
    Module(
        name="kube",
        requirement="k8s.io/kubernetes",
        packages=(
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler",
        ),
        binaries=("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
        cold_minutes=5,
        stamp=_kube_stamp,
    ),
)

#: Optional workload controllers, by name; built only when a cluster wants them.
ADDON_MODULES: dict[str, Module] = {
    m.name: m
    for m in (
        Module(
            name="jobset",
            requirement="sigs.k8s.io/jobset",
            packages=("sigs.k8s.io/jobset",),  # the module root is its main package
            binaries=("jobset",),
            assets=("config/components/crd/bases/*.yaml", "config/components/webhook/manifests.yaml"),
            cold_minutes=2,
        ),
        Module(
            name="volcano",
            requirement="volcano.sh/volcano",
            packages=("volcano.sh/volcano/cmd/controller-manager", "volcano.sh/volcano/cmd/scheduler"),
            binaries=("controller-manager", "scheduler"),
            assets=("config/crd/volcano/bases/*.yaml",),
            cold_minutes=3,
            # volcano.sh/apis v1.15.1 is not on the proxy; v1.14.0 lacks one constant.
            patches=(
                Patch(
                    module="volcano.sh/apis",
                    files=(
                        (
                            "pkg/apis/scheduling/v1beta1/ringdevcluster_queue_allocation_gate.go",
                            "queue_allocation_gate.go.overlay",
                        ),
                    ),
                ),
            ),
        ),
        Module(
            name="kueue",
            requirement="sigs.k8s.io/kueue",
            packages=(".",),  # main.go: upstream's controllers, scheduler and webhooks, loopback wiring
            binaries=("kueue",),
            assets=(
                "config/components/crd/bases/*.yaml",
                # which CRDs convert through the webhook: the patches upstream's kustomization applies
                "config/components/crd/kustomization.yaml",
                "config/components/crd/patches/webhook_in_*.yaml",
                "config/components/webhook/manifests.yaml",
            ),
            cold_minutes=6,
        ),
        Module(
            name="lws",
            requirement="sigs.k8s.io/lws",
            packages=("sigs.k8s.io/lws/cmd",),
            binaries=("lws-controller",),
            output="lws-controller",
            assets=("config/crd/bases/*.yaml", "config/webhook/manifests.yaml"),
            cold_minutes=4,
        ),
        Module(
            name="trainer",
            requirement="github.com/kubeflow/trainer/v2",
            packages=(".",),  # main.go: upstream's controllers and webhooks, loopback wiring
            binaries=("trainer",),
            assets=("manifests/base/crds/trainer.kubeflow.org_*.yaml", "manifests/base/webhook/manifests.yaml"),
            cold_minutes=2,
        ),
        # The real node (``--with node``): the kubelet and kube-proxy of the
        # control plane's release (same go.mod and replaces as ``kube``, plus
        # what the kubelet needs), the pod sandbox's pause binary and the TCP
        # relay that lets pods reach the loopback API server.
        Module(
            name="node",
            requirement="k8s.io/kubernetes",
            packages=("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-proxy", "./pause", "./relay"),
            binaries=("kubelet", "kube-proxy", "pause", "relay"),
            cold_minutes=1,  # after kube: most packages are shared
            stamp=_kube_stamp,
        ),
        Module(
            name="coredns",
            requirement="github.com/coredns/coredns",
            packages=(".",),  # main.go: upstream's server with the plugins the Corefile uses
            binaries=("coredns",),
            cold_minutes=1,
        ),
        # ``up --second-network --multus``: the Multus CNI thin plugin, the
        # node's CNI configuration delegating to the cluster network and to
        # the NetworkAttachmentDefinitions a pod asks for; its daemonset
        # manifest holds the NetworkAttachmentDefinition CRD the cluster installs.
        Module(
            name="multus",
            requirement="gopkg.in/k8snetworkplumbingwg/multus-cni.v4",
            packages=("gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus",),
            binaries=("multus",),
            assets=("deployments/multus-daemonset.yml",),
            cold_minutes=3,
        ),
        # Client tools (:data:`TOOL_MODULES`), run by tests and operators
        # rather than by a cluster: Helm for the chart (build/chart/), kubectl
        # (the control plane's release) for `kubectl apply -k` of the
        # kustomize base. Two modules: Helm v3.22 is built against k8s.io
        # v0.37, kubectl against the cluster's v0.35 (shared with the kube build).
        Module(
            name="helm",
            requirement="helm.sh/helm/v3",
            packages=("helm.sh/helm/v3/cmd/helm",),
            binaries=("helm",),
            cold_minutes=2,
            stamp=_helm_stamp,
        ),
        Module(
            name="kubectl",
            requirement="k8s.io/kubectl",
            packages=(".",),  # main.go: k8s.io/kubectl's command
            binaries=("kubectl",),
            cold_minutes=1,
            stamp=_kubectl_stamp,
        ),
        # ``--with prometheus``: the Prometheus server that scrapes the
        # controller pods on the real node, and promtool (the alert rules'
        # checks and unit tests). Only the Kubernetes service discovery is
        # compiled in; without the ``builtinassets`` tag there is no web UI,
        # the HTTP API is all the tests use.
        Module(
            name="prometheus",
            requirement="github.com/prometheus/prometheus",
            packages=(
                "github.com/prometheus/prometheus/cmd/prometheus",
                "github.com/prometheus/prometheus/cmd/promtool",
            ),
            binaries=("prometheus", "promtool"),
            cold_minutes=2,
            stamp=_prometheus_stamp,
            tags=("remove_all_sd", "enable_kubernetes_sd"),
        ),
    )
}

#: The client tools among :data:`ADDON_MODULES` (``ring-devcluster tools``).
TOOL_MODULES: tuple[str, ...] = ("helm", "kubectl")


def modules_for(addons: Sequence[str] = ()) -> list[Module]:
    """The base modules followed by those of ``addons`` (names of :data:`ADDON_MODULES`)."""
    unknown = [a for a in addons if a not in ADDON_MODULES]
    if unknown:
        raise BuildError(f"unknown optional component(s) {unknown}; known: {sorted(ADDON_MODULES)}")
    return [*MODULES, *(ADDON_MODULES[a] for a in dict.fromkeys(addons))]


def find_source_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Locate ``build/devcluster`` (the wrapper modules).

    Order: ``override``, ``$RING_DEVCLUSTER_SOURCE``, then the repository that
    holds this package (``build/devcluster``, beside it). Raises :class:`BuildError` when
    none holds the wrapper modules.
    """
    candidates: list[Path] = []
    if override:
        candidates.append(Path(override))
    env = os.environ.get("RING_DEVCLUSTER_SOURCE")
    if env:
        candidates.append(Path(env))
    candidates.append(Path(__file__).resolve().parents[1])  # build/devcluster: this package's home
    for candidate in candidates:
        if all((candidate / m.name / "go.mod").is_file() for m in MODULES):
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise BuildError(
        "cannot find the control plane's Go wrapper modules (build/devcluster/{kube,etcd,kwok}); "
        f"tried: {tried}. Run from a checkout (pip install -e .) or set RING_DEVCLUSTER_SOURCE."
    )


def cache_dir() -> Path:
    """The root of the binary cache (see the module docstring)."""
    env = os.environ.get("RING_DEVCLUSTER_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "ring-devcluster"


def module_version(go_mod: str, requirement: str) -> str:
    """The version ``go_mod`` (file text) requires of module ``requirement``."""
    pattern = rf"^\s*(?:require\s+)?{re.escape(requirement)}\s+(v\S+)"
    match = re.search(pattern, go_mod, flags=re.MULTILINE)
    if match is None:
        raise BuildError(f"go.mod does not require {requirement}")
    return match.group(1)


def cache_key(*, files: dict[str, bytes], argv: Sequence[str]) -> str:
    """A short stable hash of the wrapper module's files and the build argv.

    ``files`` maps relative file names to their contents; the output directory
    in ``argv`` must already be replaced by a placeholder by the caller.
    """
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    digest.update("\0".join(argv).encode())
    return digest.hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class _Plan:
    module: Module
    source: Path
    version: str
    key: str

    @property
    def entry(self) -> str:
        return f"{self.module.name}-{self.version}-{self.key}"


def _plan(module: Module, source_root: Path) -> _Plan:
    source = source_root / module.name
    # go.mod, go.sum and every .go file, those of sub-packages (the node
    # module's pause and relay commands) under their relative paths.
    files = {
        p.relative_to(source).as_posix(): p.read_bytes()
        for p in sorted(source.rglob("*"))
        if p.is_file() and (p.suffix == ".go" or (p.parent == source and p.name in ("go.mod", "go.sum")))
    }
    if "go.mod" not in files:
        raise BuildError(f"the wrapper module {source} has no go.mod; is the checkout complete?")
    for patch in module.patches:
        for target, name in patch.files:
            if not (source / name).is_file():
                raise BuildError(f"the wrapper module {source} has no {name} (a patch of {patch.module})")
            files[f"patch:{patch.module}/{target}"] = (source / name).read_bytes()
    version = module_version(files["go.mod"].decode(), module.requirement)
    # The asset patterns decide what the entry holds, so they are part of its key.
    argv = [*module.build_args(version, Path("OUT")), *(f"asset:{a}" for a in module.assets)]
    return _Plan(module=module, source=source, version=version, key=cache_key(files=files, argv=argv))


def _wrapper_versions(roots: dict[str, Path], modules: Sequence[Module]) -> dict[str, str]:
    return {m.name: module_version((roots[m.name] / m.name / "go.mod").read_text(), m.requirement) for m in modules}


def kube_source(kube: str | None, *, source_root: Path, say: Callable[[str], None] | None = None) -> Path:
    """The directory holding the ``kube`` and ``node`` wrapper modules of Kubernetes ``kube``.

    ``kube`` is a full version (``v1.32.13``, see
    :func:`ringdevcluster.kubeversions.resolve`) or None for the pinned one;
    the pinned release is ``source_root`` itself, any other is generated once
    under the cache (:func:`ringdevcluster.kubeversions.generate`). Raises
    :class:`BuildError` when it cannot be generated.
    """
    if kube is None:
        return source_root
    pinned = module_version((source_root / "kube" / "go.mod").read_text(), kubeversions.KUBERNETES)
    if kube == pinned:
        return source_root
    emit = say or (lambda msg: print(f"ring-devcluster: {msg}", file=sys.stderr, flush=True))
    try:
        return kubeversions.generate(kube, pinned=source_root, cache=cache_dir(), say=emit)
    except (kubeversions.VersionError, OSError, ValueError, KeyError) as err:
        raise BuildError(f"cannot prepare Kubernetes {kube}: {err}") from None


def resolve_kube(spec: str | None) -> str | None:
    """The full version a ``--kube`` value names (None stays None: the pinned release);
    :class:`BuildError` when it names none (:func:`ringdevcluster.kubeversions.resolve`)."""
    if spec is None:
        return None
    try:
        return kubeversions.resolve(spec, cache=cache_dir())
    except kubeversions.VersionError as err:
        raise BuildError(str(err)) from None


def _roots(
    modules: Sequence[Module], *, source_root: Path, kube: str | None, say: Callable[[str], None] | None
) -> dict[str, Path]:
    """Each module's source root: ``source_root``, or for kube and node that of :func:`kube_source`."""
    wanted = [m for m in modules if m.name in kubeversions.KUBE_MODULES]
    kube_root = kube_source(kube, source_root=source_root, say=say) if wanted else source_root
    return {m.name: kube_root if m.name in kubeversions.KUBE_MODULES else source_root for m in modules}


def _copy_assets(plan: _Plan, out_dir: Path, env: dict[str, str]) -> int:
    """Copy ``plan.module.assets`` from the module source into ``out_dir/assets``; return the count."""
    if not plan.module.assets:
        return 0
    proc = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", plan.module.requirement],
        cwd=plan.source, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    module_dir = Path(proc.stdout.strip())
    if proc.returncode != 0 or not module_dir.is_dir():
        raise BuildError(f"cannot locate the source of {plan.module.requirement}: {proc.stderr.strip()}")
    copied = 0
    for pattern in plan.module.assets:
        matches = sorted(module_dir.glob(pattern))
        if not matches:
            raise BuildError(f"{plan.module.requirement} {plan.version} has no file matching {pattern!r}")
        for found in matches:
            target = out_dir / "assets" / found.relative_to(module_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, target)  # module cache files are read-only; copy contents only
            copied += 1
    return copied


def replace_with_directory(go_mod: str, module: str, directory: Path) -> tuple[str, str]:
    """``go_mod`` (file text) with its ``module => module vX`` replace pointing at ``directory``
    instead, and that ``vX``. Raises :class:`BuildError` when ``go_mod`` has no such replace."""
    path = re.escape(module)
    pattern = rf"^([ \t]*(?:replace[ \t]+)?){path}[ \t]+=>[ \t]+{path}[ \t]+(v\S+)[ \t]*$"
    match = re.search(pattern, go_mod, flags=re.MULTILINE)
    if match is None:
        raise BuildError(f"go.mod must replace {module} by a published version ({module} => {module} vX.Y.Z)")
    text = f"{go_mod[: match.start()]}{match.group(1)}{module} => {directory}{go_mod[match.end() :]}"
    return text, match.group(2)


def _patched_modfile(plan: _Plan, *, root: Path, env: dict[str, str]) -> Path:
    """Apply ``plan.module.patches`` (see :class:`Patch`); return the ``go.mod`` for ``go build -modfile``."""
    work = root / "src" / plan.module.name
    go_mod = (plan.source / "go.mod").read_text()
    for patch in plan.module.patches:
        target = work / patch.module
        go_mod, version = replace_with_directory(go_mod, patch.module, target)
        proc = subprocess.run(
            ["go", "mod", "download", "-json", f"{patch.module}@{version}"],
            cwd=plan.source, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        try:
            origin = Path(json.loads(proc.stdout)["Dir"])
        except (ValueError, KeyError, TypeError):
            raise BuildError(f"cannot download {patch.module}@{version}: {proc.stdout}{proc.stderr}") from None
        shutil.rmtree(target, ignore_errors=True)
        # Module cache files are read-only: copy contents, then open the directories.
        shutil.copytree(origin, target, copy_function=shutil.copyfile)
        for directory in [target, *(p for p in target.rglob("*") if p.is_dir())]:
            directory.chmod(0o755)
        for name, source in patch.files:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(plan.source / source, target / name)
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(go_mod)
    shutil.copyfile(plan.source / "go.sum", work / "go.sum")  # -modfile X.mod reads X.sum
    return work / "go.mod"


def _format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _build(plan: _Plan, *, root: Path, say: Callable[[str], None]) -> None:
    bin_root = root / "bin"
    # Shown to the user: the command as if it wrote straight into the cache.
    shown = shlex.join(plan.module.build_args(plan.version, bin_root / plan.entry))
    if shutil.which("go") is None:
        raise BuildError(
            f"building {plan.module.name} {plan.version} needs the Go toolchain, but `go` is not on PATH. "
            f"Install Go >= 1.25 and re-run.\ncommand: cd {plan.source} && {shown}"
        )
    log_dir = root / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{plan.entry}.log"
    bin_root.mkdir(parents=True, exist_ok=True)
    tmp_out = Path(tempfile.mkdtemp(prefix=f".{plan.entry}.", dir=bin_root))
    argv = plan.module.build_args(plan.version, tmp_out)
    # A release whose go line is newer than the local toolchain gets it through the proxy.
    env = kubeversions.toolchain_env((plan.source / "go.mod").read_text(), dict(os.environ))
    # VCS stamping would make the link step depend on the checkout's git state.
    env["GOFLAGS"] = " ".join(filter(None, [env.get("GOFLAGS", ""), "-buildvcs=false"]))
    if plan.module.patches:
        try:
            argv = [*argv[:2], f"-modfile={_patched_modfile(plan, root=root, env=env)}", *argv[2:]]
        except BaseException:
            shutil.rmtree(tmp_out, ignore_errors=True)
            raise
    say(f"building {plan.module.name} {plan.version} ({', '.join(plan.module.binaries)}); log: {log_path}")
    started = time.monotonic()
    compiled = 0
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"$ cd {plan.source} && {shlex.join(argv)}\n")
        log.flush()
        proc = subprocess.Popen(
            argv, cwd=plan.source, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        done = threading.Event()

        def report() -> None:
            while not done.wait(20.0):
                say(
                    f"  {plan.module.name}: {compiled} packages compiled, {_format_elapsed(time.monotonic() - started)}"
                )

        reporter = threading.Thread(target=report, daemon=True)
        reporter.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            # `go build -v` names each package as it is compiled; errors are
            # indented or contain a colon, so only count plain import paths.
            if line.strip() and " " not in line.strip() and ":" not in line:
                compiled += 1
        code = proc.wait()
        done.set()
        reporter.join()
    elapsed = _format_elapsed(time.monotonic() - started)
    if code != 0:
        shutil.rmtree(tmp_out, ignore_errors=True)
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise BuildError(
            f"building {plan.module.name} {plan.version} failed (exit {code}) after {elapsed}.\n"
            f"command: cd {plan.source} && {shown}\nlog: {log_path}\nlast lines:\n{tail}"
        )
    missing = [b for b in plan.module.binaries if not (tmp_out / b).is_file()]
    if missing:
        shutil.rmtree(tmp_out, ignore_errors=True)
        raise BuildError(f"go build of {plan.module.name} succeeded but did not produce {missing}; log: {log_path}")
    try:
        assets = _copy_assets(plan, tmp_out, env)
    except BaseException:
        shutil.rmtree(tmp_out, ignore_errors=True)
        raise
    final = bin_root / plan.entry
    try:
        tmp_out.rename(final)
    except OSError:
        # A concurrent build won the race; its result is equivalent.
        shutil.rmtree(tmp_out, ignore_errors=True)
    extra = f", {assets} manifests" if assets else ""
    say(f"built {plan.module.name} {plan.version} in {elapsed} ({compiled} packages compiled{extra})")


def binary_paths(*, source: str | os.PathLike[str] | None = None, addons: Sequence[str] = ()) -> dict[str, Path] | None:
    """Paths of every cached binary (base and ``addons``, the pinned Kubernetes), or None when any
    is missing (no building)."""
    root = cache_dir()
    paths: dict[str, Path] = {}
    source_root = find_source_dir(source)
    for module in modules_for(addons):
        entry = root / "bin" / _plan(module, source_root).entry
        for binary in module.binaries:
            path = entry / binary
            if not os.access(path, os.X_OK):
                return None
            paths[binary] = path
    return paths


def ensure_binaries(
    *,
    source: str | os.PathLike[str] | None = None,
    say: Callable[[str], None] | None = None,
    addons: Sequence[str] = (),
    kube: str | None = None,
) -> tuple[dict[str, Path], dict[str, str]]:
    """Return ``({binary name: path}, {module name: version})``, building what is missing.

    The base modules are always included, the :data:`ADDON_MODULES` named in
    ``addons`` too; ``kube`` (a full version such as ``v1.32.13``, None: the
    pinned one) picks the Kubernetes release of the ``kube`` and ``node``
    modules (:func:`kube_source`); a binary's directory (``path.parent``) is its cache
    entry, whose ``assets/`` holds the module's copied manifests. Builds run
    serially and print progress through ``say`` (default: stderr). Raises
    :class:`BuildError` naming the failed component, the command and the log
    path; the caller should print it and exit non-zero.
    """
    source_root = find_source_dir(source)
    modules = modules_for(addons)
    return _ensure(modules, roots=_roots(modules, source_root=source_root, kube=kube, say=say), say=say)


def download(
    *,
    source: str | os.PathLike[str] | None = None,
    say: Callable[[str], None] | None = None,
    addons: Sequence[str] = (),
    kube: str | None = None,
) -> dict[str, float]:
    """:func:`prefetch` for the base modules, ``addons`` and the client tools (``ring-devcluster
    build --download-only``): ``{module name: wall seconds}``."""
    source_root = find_source_dir(source)
    modules = [*modules_for(addons), *(ADDON_MODULES[t] for t in TOOL_MODULES if t not in addons)]
    return prefetch(modules, roots=_roots(modules, source_root=source_root, kube=kube, say=say), say=say)


def ensure_tools(
    names: Sequence[str] = TOOL_MODULES,
    *,
    source: str | os.PathLike[str] | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """``{tool: path}`` of the client tools ``names`` (of :data:`TOOL_MODULES`), building what is missing.

    Unlike :func:`ensure_binaries`, the control plane's modules are left out:
    a chart test needs Helm, not a rebuilt API server.
    """
    unknown = [n for n in names if n not in TOOL_MODULES]
    if unknown:
        raise BuildError(f"unknown tool(s) {unknown}; known: {list(TOOL_MODULES)}")
    modules = [ADDON_MODULES[n] for n in dict.fromkeys(names)]
    source_root = find_source_dir(source)
    paths, _ = _ensure(modules, roots={m.name: source_root for m in modules}, say=say)
    return paths


def _download_argv(module: Module) -> list[str]:
    # `go list -deps` loads (so downloads) exactly the packages `go build` compiles.
    return [
        "go", "list", "-e", "-deps", "-f", "{{if .Error}}{{.Error}}{{end}}",
        *(["-tags", ",".join(module.tags)] if module.tags else []), *module.packages,
    ]  # fmt: skip


def _download(plan: _Plan) -> float:
    """Download what ``plan`` builds from (at nice 19); its wall seconds. Failures are left to the build."""
    started = time.monotonic()
    env = kubeversions.toolchain_env((plan.source / "go.mod").read_text(), dict(os.environ))
    with contextlib.suppress(OSError):
        subprocess.run(
            ["nice", "-n", "19", *_download_argv(plan.module)],
            cwd=plan.source, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    return time.monotonic() - started


def prefetch(
    modules: Sequence[Module], *, roots: dict[str, Path], say: Callable[[str], None] | None = None, workers: int = 2
) -> dict[str, float]:
    """Download the Go modules the uncached builds of ``modules`` need, ``workers`` at a time, in order;
    ``{module name: wall seconds}``. Compiles nothing; a build that follows finds its modules in place."""
    emit = say or (lambda msg: print(f"ring-devcluster: {msg}", file=sys.stderr, flush=True))
    root = cache_dir()
    plans = [_plan(m, roots[m.name]) for m in modules]
    todo = [p for p in plans if not all(os.access(root / "bin" / p.entry / b, os.X_OK) for b in p.module.binaries)]
    if shutil.which("go") is None or not todo:
        return {}
    seconds: dict[str, float] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for plan, took in zip(todo, pool.map(_download, todo), strict=True):
            seconds[plan.module.name] = took
            emit(f"downloaded the modules of {plan.module.name} {plan.version} in {_format_elapsed(took)}")
    return seconds


def _ensure(
    modules: Sequence[Module], *, roots: dict[str, Path], say: Callable[[str], None] | None
) -> tuple[dict[str, Path], dict[str, str]]:
    emit = say or (lambda msg: print(f"ring-devcluster: {msg}", file=sys.stderr, flush=True))
    root = cache_dir()
    paths: dict[str, Path] = {}
    plans = [_plan(m, roots[m.name]) for m in modules]
    todo = [p for p in plans if not all(os.access(root / "bin" / p.entry / b, os.X_OK) for b in p.module.binaries)]
    if todo:
        minutes = sum(p.module.cold_minutes for p in todo)
        emit(
            f"building {len(todo)} of {len(plans)} modules ({', '.join(p.module.name for p in todo)}) into "
            f"{root / 'bin'} (cold: roughly {minutes} minutes on 2 cores; later runs reuse it)"
        )
    # The next modules' downloads go on while this one compiles.
    ahead = threading.Thread(target=lambda: [_download(p) for p in todo[1:]], daemon=True)
    if len(todo) > 1 and shutil.which("go") is not None:
        ahead.start()
    for plan in todo:
        _build(plan, root=root, say=emit)
    if ahead.is_alive():
        ahead.join()
    for plan in plans:
        for binary in plan.module.binaries:
            paths[binary] = root / "bin" / plan.entry / binary
    return paths, _wrapper_versions(roots, modules)
