"""The Helm chart and the kustomize base, rendered by the real tools, next to the shipped manifests.

``helm`` and ``kubectl`` are the dev cluster's client tools (``ring-devcluster
tools``: built from the Go module proxy on first use, cached afterwards); a
failed build raises, so the tests that need them fail with its message. The
manifest readers (``shipped``, ``documents``) need neither tool.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.support.clients import REPO

Json = dict[str, Any]

CHART = REPO / "build" / "chart" / "ring-controller"
KUSTOMIZE_BASE = REPO / "build"
#: What the chart renders by default: these files' objects but the Namespace.
SHIPPED = ("ring-controller.yaml", "rbac.yaml")
#: Labels Helm's bookkeeping adds to the chart's objects (never to pods or selectors).
HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart")


@functools.cache
def tool(name: str) -> Path:
    """The path of client tool ``name`` (helm, kubectl), built and cached on first use."""
    from ringdevcluster import build  # the dev-cluster tool: only the tests that run helm or kubectl need it

    return build.ensure_tools([name])[name]


def run(argv: Sequence[str | Path], *, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a tool; on failure (with ``check``) raise with its output, which says what went wrong."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


def documents(text: str) -> list[Json]:
    """The non-empty YAML documents of ``text``."""
    return [d for d in yaml.safe_load_all(text) if d]


def shipped(*names: str) -> list[Json]:
    """The objects of ``build/<name>`` files."""
    return [d for n in names for d in documents((REPO / "build" / n).read_text())]


def helm_args(values: dict[str, Any] | None = None, *, sets: Iterable[str] = ()) -> list[str]:
    """``--set-json`` flags for ``values`` (top-level keys) and ``--set`` flags for ``sets``."""
    args: list[str] = []
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    for item in sets:
        args += ["--set", item]
    return args


def template(
    values: dict[str, Any] | None = None,
    *,
    release: str = "ring-controller",
    namespace: str = "ring-controller",
    sets: Iterable[str] = (),
) -> list[Json]:
    """The objects ``helm template`` renders for ``values``."""
    argv = [tool("helm"), "template", release, CHART, "--namespace", namespace, *helm_args(values, sets=sets)]
    return documents(run(argv).stdout)


def kustomize(directory: Path) -> list[Json]:
    """The objects ``kubectl kustomize DIRECTORY`` builds."""
    return documents(run([tool("kubectl"), "kustomize", directory]).stdout)


def without_helm_labels(doc: Json) -> Json:
    """``doc`` without Helm's bookkeeping labels (a copy; an emptied ``labels`` goes too)."""
    meta = dict(doc["metadata"])
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in HELM_LABELS}
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    return {**doc, "metadata": meta}


def by_identity(docs: Iterable[Json]) -> dict[tuple[str, str, str], Json]:
    """``{(kind, namespace, name): doc}``; raises on two objects with one identity."""
    out: dict[tuple[str, str, str], Json] = {}
    for doc in docs:
        key = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
        assert key not in out, f"two objects {key}"
        out[key] = doc
    return out
