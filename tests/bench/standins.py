"""What each stand-in for a standard-library module saves one launcher starting alone (file mode).

    build/bench.sh --launcher --parts standins [--repeats 200] [--realtime] [--python PY] [--json OUT]

The rule in CONTRIBUTING.md: a stand-in stays only where it saves at least
10 ms of wall time for one launcher starting alone. This part builds the
one-file launcher from the work tree ("as-is") and once per stand-in with
that stand-in replaced by the real module, the way code written without the
stand-in would use it:

* ``dataclasses``: ``ranktable/frozen.py``'s ``record`` is
  ``dataclasses.dataclass(frozen=True)`` (``field``, ``replace``,
  ``FrozenInstanceError`` are dataclasses').

The stand-ins that failed the rule are gone from the tree, and with them
their variants here: ``argparse`` (``main`` read a plain command line with
a reader of its own), ``tempfile`` (``temp_dir``/``replace_file`` in
``ranktable/stored.py``), ``typing`` (``TYPE_CHECKING = False`` headers).
Their figures are in ``tests/bench/figures/standins.json``, measured at the
commit it names (that commit's ``tests/bench/standins.py`` builds them).

Each round starts every variant once, alone, in a shuffled order: ``PY -I -S
VARIANT.pyz --config-dir DIR -- /bin/true`` against a completed spec of 8
members with 8 devices each (the container command of a training pod; the
launcher writes its hostfiles and exec's the command). Per start: wall
seconds from ``Popen`` to exit and CPU seconds (``wait4``). Reported per
variant: p50 wall and CPU, and the saving of the stand-in: the median over
rounds of (variant - as-is), paired within a round so that the machine's
load drifts out, with the 25th and 75th percentile of those differences.
``--realtime`` starts each launcher under ``chrt -f 10`` (SCHED_FIFO; needs
root): on a machine other work keeps busy, the launcher then runs as on a
training node where it has a core of its own. No cluster is needed.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import launcherpyz
from tests.support.clients import REPO
from tests.support.kubeletdir import KubeletDir
from tests.support.specs import make_spec

#: The rule's threshold (CONTRIBUTING.md): wall seconds one launcher alone must save.
RULE_SECONDS = 0.010
POD = "job-worker-3"

_FROZEN_WITH_DATACLASSES = '''"""ranktable.frozen on dataclasses (bench variant)."""
from dataclasses import FrozenInstanceError, field, replace
from dataclasses import dataclass as _dataclass
from dataclasses import fields as _fields

__all__ = ["FrozenInstanceError", "field", "fields", "record", "replace"]


def record(cls):
    return _dataclass(frozen=True)(cls)


def fields(obj_or_class):
    return tuple(f.name for f in _fields(obj_or_class))
'''


def _with_dataclasses(tree: Path) -> None:
    (tree / "ranktable" / "frozen.py").write_text(_FROZEN_WITH_DATACLASSES, encoding="utf-8")


#: Variant name -> how its tree differs from the work tree's.
VARIANTS: dict[str, Callable[[Path], None]] = {
    "dataclasses": _with_dataclasses,
}


def build_variants(work: Path) -> dict[str, Path]:
    """The as-is pyz and one per variant (and ``all``), built under ``work``; name -> pyz."""
    builder = launcherpyz.builder()
    out: dict[str, Path] = {}
    recipes: dict[str, list[Callable[[Path], None]]] = {"as-is": []}
    recipes.update({name: [edit] for name, edit in VARIANTS.items()})
    if len(VARIANTS) > 1:
        recipes["all"] = list(VARIANTS.values())
    for name, edits in recipes.items():
        tree = work / f"tree-{name}"
        shutil.copytree(REPO / "ranktable", tree / "ranktable", ignore=shutil.ignore_patterns("__pycache__"))
        for edit in edits:
            edit(tree)
        out[name] = work / f"{name}.pyz"
        builder.build(out[name], repo=tree)
    return out


def _one(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {code}): {err.decode(errors='replace')[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def standin_figures(
    *, work: Path, python: str, repeats: int, realtime: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    """Build the variants, run ``repeats`` shuffled rounds (after one discarded), return the figures."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"], check=True, capture_output=True, text=True
    ).stdout.strip()  # the tree the variants are built from
    pyz = build_variants(work)
    config = work / "config"
    config.mkdir()
    KubeletDir(config).publish_spec(make_spec([("worker", 8)], devices=8))
    tmp = work / "tmp"
    tmp.mkdir()
    env = {"PATH": os.environ["PATH"], "POD_NAME": POD, "TMPDIR": str(tmp)}
    prefix = ["chrt", "-f", "10"] if realtime else []
    argv_of = {
        name: [
            *prefix,
            python,
            "-I",
            "-S",
            str(path),
            "--config-dir",
            str(config),
            "--timeout",
            "30",
            "--",
            "/bin/true",
        ]
        for name, path in pyz.items()
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in pyz}
    order = list(pyz)
    shuffle = random.Random(24)
    for round_ in range(repeats + 1):
        shuffle.shuffle(order)
        for name in order:
            sample = _one(argv_of[name], env, work)
            if round_:
                samples[name].append(sample)
        if round_ and round_ % 25 == 0:
            say(f"standins: {round_}/{repeats} rounds")
    base = samples["as-is"]
    rows: dict[str, Any] = {}
    for name, rows_of in samples.items():
        walls = [w for w, _ in rows_of]
        cpus = [c for _, c in rows_of]
        row: dict[str, Any] = {
            "wall_p50": statistics.median(walls),
            "cpu_p50": statistics.median(cpus),
            "n": len(rows_of),
        }
        if name != "as-is":
            dwall = [w - b for (w, _), (b, _) in zip(rows_of, base, strict=True)]
            dcpu = [c - b for (_, c), (_, b) in zip(rows_of, base, strict=True)]
            row.update(
                saving_wall_p50=statistics.median(dwall),
                saving_wall_p25=_quantile(dwall, 0.25),
                saving_wall_p75=_quantile(dwall, 0.75),
                saving_cpu_p50=statistics.median(dcpu),
                meets_rule=statistics.median(dwall) >= RULE_SECONDS,
            )
        rows[name] = row
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "commit": commit,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "python": version,
        "repeats": repeats,
        "cpus": os.cpu_count(),
        "load_avg_1m_end": load,
        "command": f"build/bench.sh --launcher --parts standins --repeats {repeats}"
        + (" --realtime" if realtime else ""),
        "realtime": realtime,
        "rule_ms": RULE_SECONDS * 1000,
        "variants": rows,
    }


def standin_lines(figures: dict[str, Any]) -> list[str]:
    """The table :func:`standin_figures`' result prints as."""
    lines = [
        f"stand-ins, file mode, one launcher alone, Python {figures['python']}, {figures['repeats']} rounds",
        f"{'real module':12} {'wall p50':>9} {'CPU p50':>9} {'saving wall p50 [p25, p75]':>28} {'CPU':>8}  rule",
    ]
    for name, row in figures["variants"].items():
        head = f"{name:12} {row['wall_p50'] * 1000:>7.1f}ms {row['cpu_p50'] * 1000:>7.1f}ms"
        if name == "as-is":
            lines.append(head)
            continue
        lines.append(
            f"{head} {row['saving_wall_p50'] * 1000:>11.1f}ms [{row['saving_wall_p25'] * 1000:5.1f}, "
            f"{row['saving_wall_p75'] * 1000:5.1f}] {row['saving_cpu_p50'] * 1000:>6.1f}ms  "
            f"{'kept (>= 10 ms)' if row['meets_rule'] else 'fails (< 10 ms)'}"
        )
    return lines


#: Variant -> (the stand-in, as docs/performance.md names it).
STAND_INS = {
    "dataclasses": "`ranktable/frozen.py`: `@record` for `@dataclass(frozen=True)`",
    "argparse": "`launchopts`' reader of a plain command line",
    "tempfile": "`stored.temp_dir` / `stored.replace_file`",
    "typing": "`TYPE_CHECKING = False` headers",
    "all": "all four at once",
}


def standin_table(figures: dict[str, Any]) -> str:
    """The Markdown table docs/performance.md shows for ``figures`` (a unit test keeps the two equal)."""
    rows = [
        "| stand-in | real module | wall saved, p50 [p25, p75] | CPU saved, p50 | by the rule |",
        "|---|---|---|---|---|",
    ]
    for name, row in figures["variants"].items():
        if name == "as-is":
            continue
        verdict = "kept" if row["meets_rule"] else "removed"
        rows.append(
            f"| {STAND_INS[name]} | {'-' if name == 'all' else f'`{name}`'} | "
            f"{row['saving_wall_p50'] * 1000:.1f} ms [{row['saving_wall_p25'] * 1000:.1f}, "
            f"{row['saving_wall_p75'] * 1000:.1f}] | {row['saving_cpu_p50'] * 1000:.1f} ms | "
            f"{'-' if name == 'all' else verdict} |"
        )
    base = figures["variants"]["as-is"]
    rows.append(
        f"| none replaced (the tree measured) | | wall {base['wall_p50'] * 1000:.1f} ms, "
        f"CPU {base['cpu_p50'] * 1000:.1f} ms per start | | |"
    )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - run through build/bench.sh --launcher --parts standins
    sys.exit("run: build/bench.sh --launcher --parts standins")
