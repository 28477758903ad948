"""Run the installed ``kubectl-ring`` (and ``ring-launch``) as a user would, and read their tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


def installed(name: str) -> str:
    """The console script ``name`` installed next to this interpreter (fails loudly when missing)."""
    exe = Path(sys.executable).with_name(name)
    if not exe.exists():
        raise RuntimeError(f"{exe} is missing: install the project (pip install -e .) first")
    return str(exe)


def run(
    name: str, *args: str, kubeconfig: Path | str | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run console script ``name`` with ``args``; ``kubeconfig`` goes in ``$KUBECONFIG``."""
    environ = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "POD_NAME", "POD_UID", "POD_IP")}
    if kubeconfig is not None:
        environ["KUBECONFIG"] = str(kubeconfig)
    environ.update(env or {})
    return subprocess.run(
        [installed(name), *args], capture_output=True, text=True, env=environ, timeout=timeout, check=False
    )


def ring(*args: str, kubeconfig: Path | str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``kubectl-ring ARGS`` against ``kubeconfig``."""
    return run("kubectl-ring", *args, kubeconfig=kubeconfig, timeout=timeout)


def table(text: str) -> list[dict[str, str]]:
    """A kubectl-style table (header line, columns three spaces apart) as one dict per row."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split()
    starts: list[int] = []
    for h in header:  # in order, so NAME is not found inside NAMESPACE
        starts.append(lines[0].index(h, starts[-1] + len(header[len(starts) - 1]) if starts else 0))
    rows = []
    for line in lines[1:]:
        cells = [line[s : (starts[i + 1] if i + 1 < len(starts) else None)].strip() for i, s in enumerate(starts)]
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def section(text: str, title: str) -> str:
    """The lines of a describe section (``Title:`` up to the next blank line), without the title."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    out = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        out.append(line)
    return "\n".join(out)


def documented_role() -> dict[str, Any]:
    """The ClusterRole docs/jobs.md gives for the plugin (the YAML block naming ``ring-viewer``)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "jobs.md").read_text(encoding="utf-8")
    blocks = page.split("```yaml\n")[1:]
    role = next(b.split("```", 1)[0] for b in blocks if "name: ring-viewer" in b)
    return yaml.safe_load(role)  # type: ignore[no-any-return]


def token_kubeconfig(admin: Path, token: str, out: Path) -> Path:
    """A kubeconfig for the cluster of ``admin`` that authenticates with ``token`` (a ServiceAccount's)."""
    config = yaml.safe_load(admin.read_text(encoding="utf-8"))
    cluster = config["clusters"][0]
    out.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "viewer", "user": {"token": token}}],
                "contexts": [{"name": "viewer", "context": {"cluster": cluster["name"], "user": "viewer"}}],
                "current-context": "viewer",
            }
        ),
        encoding="utf-8",
    )
    return out
