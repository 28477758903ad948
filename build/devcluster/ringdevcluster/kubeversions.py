"""Kubernetes releases other than the pinned one: ``--kube VERSION``.

The repository pins one release in its wrapper modules (``build/devcluster/kube``
and ``node``, whose ``go.mod`` require ``k8s.io/kubernetes``). Any other
release is built from wrapper modules generated on first use, in
``<cache>/src/kubernetes-<version>/{kube,node}``:

* ``VERSION`` is a minor (``1.32``: the newest patch of that minor the Go
  module proxy serves, from ``go list -m -versions k8s.io/kubernetes``;
  pre-releases count only when the minor has no release yet) or a full
  version (``1.32.13``, ``v1.32.13``: taken as it is);
* ``go.mod`` takes the release's own ``go`` and ``godebug`` lines and
  replaces each staging module the release's ``go.mod`` names (the list
  differs per release: ``k8s.io/externaljwt`` is new in 1.32, for one) by
  its published ``v0.<minor>.<patch>``; the ``.go`` files (``tools.go``, the
  node's ``pause`` and ``relay``) are the pinned wrapper's; ``go mod tidy``
  then writes ``go.sum``;
* a release whose ``go`` line is newer than the local toolchain is built
  with ``GOTOOLCHAIN=auto`` (Go fetches that toolchain through the module
  proxy), unless ``GOTOOLCHAIN`` is set in the environment.

The generated files feed the cache key like committed ones, so each
release's binaries live in cache entries of their own (``kube-v1.32.13-<key>``).
A directory appears by an atomic rename once complete.

What the control plane is started with differs by release where the
release lacks by default what the tests use (:func:`release_flags`): 1.32
and 1.33 get DRA (its feature gates and ``resource.k8s.io/v1beta1``), on by
default from 1.34.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "KUBE_MODULES",
    "KUBERNETES",
    "VersionError",
    "generate",
    "go_line",
    "newest_patch",
    "nearest_published",
    "normalise",
    "published_version",
    "release_flags",
    "staging_replaces",
    "wrapper_go_mod",
]

#: The module every generated wrapper requires.
KUBERNETES = "k8s.io/kubernetes"
#: The wrapper modules built from k8s.io/kubernetes (control plane, node).
KUBE_MODULES = ("kube", "node")

_FULL = re.compile(r"v?1\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?")
_MINOR = re.compile(r"v?1\.(\d+)")
_RELEASE = re.compile(r"v1\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?")


class VersionError(RuntimeError):
    """A ``--kube`` value that names no servable release, or a failed look-up; the message says which."""


def normalise(spec: str) -> tuple[str | None, int]:
    """``(full version or None, minor)`` of a ``--kube`` value: ``1.32`` is ``(None, 32)``,
    ``1.32.13`` and ``v1.32.13`` are ``("v1.32.13", 32)``. Raises :class:`VersionError` otherwise."""
    value = spec.strip()
    full = _FULL.fullmatch(value)
    if full:
        return f"v1.{full.group(1)}.{full.group(2)}{full.group(3) or ''}", int(full.group(1))
    minor = _MINOR.fullmatch(value)
    if minor:
        return None, int(minor.group(1))
    raise VersionError(f"--kube {spec!r}: expected a Kubernetes minor (1.32) or version (1.32.13, v1.32.13)")


def _key(version: str) -> tuple[int, int, int, str]:
    match = _RELEASE.fullmatch(version)
    assert match is not None
    # A release sorts after its pre-releases ("" > "-rc.1" as the last element does not hold: use a flag).
    pre = match.group(3) or ""
    return (int(match.group(1)), int(match.group(2)), 0 if pre else 1, pre)


def newest_patch(versions: list[str], minor: int) -> str | None:
    """The newest ``v1.<minor>.*`` in ``versions`` (as ``go list -m -versions`` prints them): the
    newest release, or the newest pre-release when the minor has no release yet; None when none."""
    ours = [v for v in versions if (m := _RELEASE.fullmatch(v)) and int(m.group(1)) == minor]
    releases = [v for v in ours if "-" not in v]
    pool = releases or ours
    return max(pool, key=_key) if pool else None


def go_line(go_mod: str) -> str | None:
    """The ``go`` directive's version in ``go_mod`` (file text), e.g. ``1.23.0``."""
    match = re.search(r"^go\s+(\S+)\s*$", go_mod, flags=re.MULTILINE)
    return match.group(1) if match else None


def staging_replaces(go_mod: str) -> list[str]:
    """The modules k8s.io/kubernetes's ``go_mod`` replaces by ``./staging/...`` paths, in file order."""
    return re.findall(r"^\s*(?:replace\s+)?(\S+)\s+=>\s+\./staging/\S+\s*$", go_mod, flags=re.MULTILINE)


#: Beta APIs a release serves only when asked, turned on by the dev cluster in the releases where
#: they are off: (first minor, last minor or None, feature gates, API group version for
#: ``--runtime-config``). DRA (``resource.k8s.io``: ResourceClaims reporting a NIC's address) before
#: 1.34 (DynamicResourceAllocation beta in 1.32 and 1.33; DRAResourceClaimDeviceStatus,
#: status.devices[].networkData, alpha in 1.32, beta in 1.33); GA from 1.34, its gates are then left
#: alone (a GA gate is removed some releases later, and naming a removed gate stops the process).
#: Kubernetes 1.37's Workload and PodGroup (``scheduling.k8s.io/v1beta1``): the group version is in
#: the API server's disabled-by-default beta list and its storage registers only with the
#: ``GenericWorkload`` gate, which the scheduler (gang scheduling of ``spec.schedulingGroup``) and the
#: controller manager read too.
BETA_APIS: tuple[tuple[int, int | None, str, str], ...] = (
    (0, 33, "DynamicResourceAllocation=true,DRAResourceClaimDeviceStatus=true", "resource.k8s.io/v1beta1"),
    (37, None, "GenericWorkload=true", "scheduling.k8s.io/v1beta1"),
)


def release_flags(version: str | None) -> dict[str, list[str]]:
    """The flags each control-plane process of Kubernetes ``version`` (a full version; None: the
    pinned one; a value naming no release is taken as the pinned one too) gets beside its usual
    ones: ``{process: [--flag=value, ...]}``, empty where none: the gates of :data:`BETA_APIS` that
    apply to the release on the API server, controller-manager and scheduler, and their API group
    versions in the API server's ``--runtime-config``.
    """
    release = _FULL.fullmatch(version or "")
    if release is None:
        return {}
    minor = int(release.group(1))
    wanted = [(g, gv) for first, last, g, gv in BETA_APIS if first <= minor and (last is None or minor <= last)]
    if not wanted:
        return {}
    gates = "--feature-gates=" + ",".join(g for g, _ in wanted)
    return {
        "kube-apiserver": [gates, "--runtime-config=" + ",".join(f"{gv}=true" for _, gv in wanted)],
        "kube-controller-manager": [gates],
        "kube-scheduler": [gates],
    }


def published_version(version: str) -> str:
    """The staging modules' release of Kubernetes ``version``: ``v1.32.13`` is ``v0.32.13``."""
    return "v0." + version[len("v1.") :]


def nearest_published(version: str, listed: list[str]) -> str | None:
    """The staging module release to use with Kubernetes ``version``, from the versions the proxy
    lists for that module: the same patch, else the newest earlier patch of the same minor; None
    when the list has neither."""
    wanted = published_version(version)
    if wanted in listed:
        return wanted
    same = _FULL.fullmatch(version)
    assert same is not None
    minor, patch = int(same.group(1)), int(same.group(2))
    earlier = [
        v
        for v in listed
        if (m := re.fullmatch(r"v0\.(\d+)\.(\d+)", v)) and int(m.group(1)) == minor and int(m.group(2)) <= patch
    ]
    return max(earlier, key=lambda v: int(v.rsplit(".", 1)[1])) if earlier else None


def wrapper_go_mod(*, name: str, version: str, upstream: str, substitutes: dict[str, str] | None = None) -> str:
    """The generated wrapper ``go.mod`` (before ``go mod tidy``) for module ``name`` at ``version``,
    from the release's own ``go.mod`` text ``upstream``. ``substitutes`` names the staging modules
    the proxy lacks at the release's patch, with the earlier patch to use instead (a comment in
    the file lists them)."""
    staging = staging_replaces(upstream)
    if not staging:
        raise VersionError(f"{KUBERNETES} {version}: its go.mod replaces no staging module; not a release go.mod?")
    published = published_version(version)
    chosen = {module: (substitutes or {}).get(module, published) for module in staging}
    godebug = re.findall(r"^godebug\s+.+$", upstream, flags=re.MULTILINE)
    lines = [
        f"// Generated by ring-devcluster for --kube {version}: {KUBERNETES} {version}, each staging",
        f"// module (a path in its git tree) replaced by the published {published}.",
        *(
            f"// The Go module proxy serves no {module} {published}: {chosen[module]} instead."
            for module in staging
            if chosen[module] != published
        ),
        f"module ringcontroller.local/devcluster/{name}",
        "",
        f"go {go_line(upstream) or '1.22.0'}",
        "",
        *godebug,
        *([""] if godebug else []),
        f"require {KUBERNETES} {version}",
        "",
        "replace (",
        *(f"\t{module} => {module} {chosen[module]}" for module in staging),
        ")",
        "",
    ]
    return "\n".join(lines)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def local_go() -> str | None:
    """The local toolchain's version (``1.26.8``), or None without ``go``."""
    try:
        out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.strip().removeprefix("go") or None


def toolchain_env(go_mod: str, env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``GOTOOLCHAIN=auto`` when ``go_mod``'s ``go`` line is newer than the local toolchain
    (and the caller's environment names no toolchain)."""
    need, have = go_line(go_mod), local_go()
    if need and have and _version_tuple(need) > _version_tuple(have) and not os.environ.get("GOTOOLCHAIN"):
        return {**env, "GOTOOLCHAIN": "auto"}
    return env


def _go(args: list[str], *, cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise VersionError(f"`go {' '.join(args)}` failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    return proc.stdout


def resolve(spec: str, *, cache: Path, env: dict[str, str] | None = None) -> str:
    """The full version ``--kube spec`` names (see the module docstring).

    A minor is looked up on the proxy; when that fails (offline), the newest
    release of that minor already generated in ``cache/src`` is used, else
    :class:`VersionError` says what failed.
    """
    full, minor = normalise(spec)
    if full:
        return full
    environment = dict(env or os.environ)
    try:
        out = _go(["list", "-m", "-versions", KUBERNETES], cwd=Path(tempfile.gettempdir()), env=environment)
        found = newest_patch(out.split()[1:], minor)
        if found is None:
            raise VersionError(f"the Go module proxy serves no {KUBERNETES} v1.{minor}.x")
        return found
    except VersionError as err:
        local = [p.name.removeprefix("kubernetes-") for p in (cache / "src").glob(f"kubernetes-v1.{minor}.*")]
        cached = newest_patch([v for v in local if _RELEASE.fullmatch(v)], minor)
        if cached is None:
            raise VersionError(f"--kube {spec}: cannot look up the newest v1.{minor}.x: {err}") from None
        return cached


def _substitutes(version: str, modules: list[str], *, env: dict[str, str]) -> dict[str, str]:
    """The staging modules the proxy does not list at ``version``'s patch, each with the release to use."""
    wanted = published_version(version)
    found: dict[str, str] = {}
    for module in modules:
        proc = subprocess.run(
            ["go", "list", "-m", "-versions", module],
            cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            continue  # not listed at all (the sample modules): only a problem if imported, which tidy says
        listed = proc.stdout.split()[1:]
        nearest = nearest_published(version, listed)
        if nearest is not None and nearest != wanted:
            found[module] = nearest
    return found


def generate(
    version: str, *, pinned: Path, cache: Path, say: Callable[[str], None], env: dict[str, str] | None = None
) -> Path:
    """The directory holding ``kube/`` and ``node/`` wrapper modules for ``version`` (generated once).

    ``pinned`` is the repository's ``build/devcluster``, whose ``.go`` files
    the generated modules copy. Raises :class:`VersionError` when the release
    cannot be fetched or tidied.
    """
    root = cache / "src" / f"kubernetes-{version}"
    if all((root / name / "go.sum").is_file() for name in KUBE_MODULES):
        return root
    environment = dict(env or os.environ)
    environment["GOFLAGS"] = " ".join(filter(None, [environment.get("GOFLAGS", ""), "-mod=mod"]))
    say(f"generating the wrapper modules of {KUBERNETES} {version} in {root} (go mod tidy; a minute or two)")
    info = json.loads(_go(["mod", "download", "-json", f"{KUBERNETES}@{version}"], cwd=pinned, env=environment))
    upstream = Path(info["GoMod"]).read_text()
    substitutes = _substitutes(version, staging_replaces(upstream), env=environment)
    if substitutes:
        say(
            f"the proxy lacks {len(substitutes)} staging module(s) at {published_version(version)}; using "
            + ", ".join(f"{m} {v}" for m, v in sorted(substitutes.items()))
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".kubernetes-{version}.", dir=root.parent))
    try:
        for name in KUBE_MODULES:
            target = work / name
            target.mkdir()
            for source in sorted((pinned / name).rglob("*.go")):
                dest = target / source.relative_to(pinned / name)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)
            text = wrapper_go_mod(name=name, version=version, upstream=upstream, substitutes=substitutes)
            (target / "go.mod").write_text(text)
            _go(["mod", "tidy"], cwd=target, env=toolchain_env(text, environment))
        complete = all((root / name / "go.sum").is_file() for name in KUBE_MODULES)
        if not complete:
            shutil.rmtree(root, ignore_errors=True)  # a half-made one (none is left by design)
            try:
                work.rename(root)
            except OSError:
                complete = all((root / name / "go.sum").is_file() for name in KUBE_MODULES)
                if not complete:
                    raise
        if complete:  # another process made it meanwhile; its files are the same
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    say(f"generated {root}")
    return root
