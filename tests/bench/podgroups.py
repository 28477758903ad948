"""The PodGroup tests' latest opt-in run, as committed JSON (they need Kubernetes 1.37; CI runs 1.35).

``build/podgroups.sh`` runs them on a 1.37 control plane of their own and
records the run here::

    python -m tests.bench.podgroups --kube v1.37.2 --junit .state/podgroups-v1.37.2.xml \\
        --exit-code 0 --seconds 312 --command "build/podgroups.sh"

The JSON (``tests/bench/figures/podgroups-<minor>.json``): ``{"kube", "date",
"command", "seconds", "exit_code", "outcome", "passed", "failed", "errors",
"skipped", "tests": [{"name", "outcome"}]}``; ``outcome`` as
:func:`tests.bench.matrix.outcome` judges it (any skip fails the run).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.bench.matrix import junit_counts, outcome

__all__ = ["FIGURES_DIR", "figures_path", "main", "testcases"]

Json = dict[str, Any]

FIGURES_DIR = Path(__file__).resolve().parent / "figures"


def figures_path(kube: str) -> Path:
    """Where the run on Kubernetes ``kube`` (``v1.37.2``) is kept: one file per minor."""
    match = re.match(r"v?1\.(\d+)", kube)
    minor = match.group(1) if match else kube
    return FIGURES_DIR / f"podgroups-1.{minor}.json"


def testcases(path: Path) -> list[Json]:
    """``[{"name", "outcome"}]`` of every test case in a pytest JUnit XML report, in report order."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        tags = {child.tag for child in case}
        state = next((t for t in ("failure", "error", "skipped") if t in tags), "passed")
        out.append({"name": name, "outcome": {"failure": "failed", "error": "errors"}.get(state, state)})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Record one run (see the module doc); prints the file written."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.podgroups")
    parser.add_argument("--kube", required=True)
    parser.add_argument("--junit", type=Path, required=True)
    parser.add_argument("--exit-code", type=int, required=True)
    parser.add_argument("--seconds", type=int, default=0)
    parser.add_argument("--command", default="build/podgroups.sh")
    args = parser.parse_args(argv)
    counts = junit_counts(args.junit)
    doc = {
        "kube": args.kube,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "command": args.command,
        "seconds": args.seconds,
        "exit_code": args.exit_code,
        "outcome": outcome(counts, exit_code=args.exit_code),
        **counts,
        "tests": testcases(args.junit),
    }
    path = figures_path(args.kube)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
