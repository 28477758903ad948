"""The Kueue tier's latest results: what ``build/kueue.sh --record`` writes into tests/bench/figures/kueue.json.

The tier (tests/kueue, marker ``kueue``) is opt-in: Kueue's cold build and
its cluster do not fit the default CI run. Its record says what ran, when,
how long each part took and which test passed::

    python -m tests.bench.kueue record --junit .state/kueue.xml --exit-code 0 \\
        --build-log .state/kueue-build.log --build-seconds 412 --up-seconds 38 --tests-seconds 141 \\
        --versions jobset=v0.12.0,trainer=v2.3.0,kueue=v0.19.2 --command "build/kueue.sh --record"

The JSON (:data:`FIGURES`): ``{"date", "command", "outcome", "passed",
"failed", "errors", "skipped", "versions", "seconds": {"build", "up",
"tests"}, "built": {module: "XmYYs" as ring-devcluster printed it, or
"cached"}, "last_build": {module: {"time", "date", "command"}}, "tests":
[{"name", "outcome", "seconds"}]}``. ``last_build`` keeps, per module, the
last recorded run that compiled it (a run that found it cached carries the
earlier one over), so the cold build time stays on record. ``outcome`` is
:func:`tests.bench.matrix.outcome`'s (a skip fails the tier, as everywhere).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.bench.matrix import junit_counts, outcome

__all__ = ["FIGURES", "built_modules", "main", "case_results"]

Json = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "tests" / "bench" / "figures" / "kueue.json"
#: ring-devcluster's line for a module it compiled: "built kueue v0.19.2 in 6m12s (...)".
_BUILT = re.compile(r"built (\S+) (v\S+) in (\S+)")


def built_modules(log: str, modules: Sequence[str]) -> dict[str, str]:
    """``{module: build time}`` for each of ``modules``: as the build log says, ``cached`` when it built none."""
    times = {m.group(1): m.group(3) for m in _BUILT.finditer(log)}
    return {name: times.get(name, "cached") for name in modules}


def case_results(path: Path) -> list[Json]:
    """``[{"name", "outcome", "seconds"}]`` per test case of a pytest JUnit XML report, in report order."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        result = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        out.append({"name": case.get("name", ""), "outcome": result, "seconds": round(float(case.get("time", 0)), 1)})
    return out


def _pairs(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def main(argv: Sequence[str] | None = None) -> int:
    """``record``: write :data:`FIGURES` from one run of the tier."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.kueue", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record", help="record one run of the Kueue tier")
    rec.add_argument("--junit", type=Path, required=True, help="pytest's JUnit XML report of tests/kueue")
    rec.add_argument("--exit-code", type=int, required=True, help="pytest's exit code")
    rec.add_argument("--build-log", type=Path, required=True, help="the output of `ring-devcluster build`")
    rec.add_argument("--build-seconds", type=int, required=True)
    rec.add_argument("--up-seconds", type=int, required=True)
    rec.add_argument("--tests-seconds", type=int, required=True)
    rec.add_argument("--versions", default="", help="module=version,... of the cluster")
    rec.add_argument("--command", required=True, help="the command line that ran the tier")
    rec.add_argument("--out", type=Path, default=FIGURES)
    args = parser.parse_args(argv)
    counts = junit_counts(args.junit)
    versions = _pairs(args.versions)
    doc = {
        "date": dt.datetime.now(dt.UTC).date().isoformat(),
        "command": args.command,
        "outcome": outcome(counts, exit_code=args.exit_code),
        **counts,
        "versions": versions,
        "seconds": {"build": args.build_seconds, "up": args.up_seconds, "tests": args.tests_seconds},
        "built": built_modules(args.build_log.read_text(errors="replace"), ["jobset", "trainer", "kueue"]),
        "tests": case_results(args.junit),
    }
    earlier = json.loads(args.out.read_text()).get("last_build", {}) if args.out.is_file() else {}
    doc["last_build"] = {
        name: {"time": took, "date": doc["date"], "command": args.command} if took != "cached" else earlier[name]
        for name, took in doc["built"].items()
        if took != "cached" or name in earlier
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{args.out}: {doc['outcome']} ({counts['passed']} passed)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
