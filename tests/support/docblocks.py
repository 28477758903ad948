"""Blocks of the docs written by a program: the figures of record from committed JSON, the daemon's flags from its parser.

A block sits between two HTML comments that Markdown does not show::

    <!-- generated: NAME (python -m tests.support.docblocks --write) -->
    ...
    <!-- end generated: NAME -->

and holds exactly what :data:`BLOCKS` ``[NAME]`` renders. ``python -m
tests.support.docblocks --write`` rewrites every block in README.md and
``docs/*.md``; without ``--write`` it lists the blocks that differ and exits 1.
tests/unit/test_docblocks.py fails while any block differs, so a figure
changes in the JSON (``tests/bench/figures/``) or a flag in
``ringcontroller/options.py`` and the docs follow in the same commit.

Renderers:

- ``daemon-flags`` (docs/operating.md): every flag of ``ring-controller
  --help``, its default and its help text, from
  :func:`ringcontroller.options.parser`.
- ``readme-vs-dns`` (README.md): discovery overhead p50 per runtime at the
  fewest and the most workers measured, and the DNS ratio, from ``vs-dns.json``.
- ``vs-dns-overhead`` and ``vs-dns-stages`` (docs/performance.md): the
  per-cell table and the stage-by-stage table of ``vs-dns.json``, as
  ``python -m tests.bench.vsdns --merge`` prints them; ``vs-dns-summary``:
  the DNS ratios and end to end in one paragraph; ``vs-dns-when``: the
  dates and times of the runs; ``vs-dns-trainer-split``:
  trained against probe runs; ``vs-dns-targets``: issue
  24's targets, met only within their bound.
- ``delivery-stages`` (docs/performance.md): the two tables of
  ``delivery-stages.json``; ``delivery-touch``: ``delivery.json``, with and
  without the pod touch.
- ``superpod`` and ``superpod-targets`` (docs/performance.md): rank tables
  at super-pod scale from ``superpod.json``, and issue 25's targets.
- ``topology`` and ``topology-effect`` (docs/performance.md): ring edges
  across racks and spines (``topology.json``) and the all-reduce they cost
  (``topology-effect.json``).
- ``scale-*`` (docs/performance.md): the fleet-scale figures of
  ``figures/scale/`` (:mod:`tests.support.scaleblocks`).
- ``second-network`` (docs/performance.md): bytes each TensorFlow worker sent
  on its two interfaces while training over the second pod network
  (``second-network.json``).
- ``network-effect`` (docs/performance.md): the ring all-reduce over the
  pod network and over the second network with one bridge shaped, its time
  and bytes per interface (``network-effect.json``, ``python -m
  tests.bench.network_effect``); ``network-overhead``: the discovery
  overhead of jobs listed on the second network beside the same runtimes on
  the pod network (``network-overhead.json``, ``build/bench.sh --vs-dns --network``).
- ``kueue-tier`` (docs/performance.md): the opt-in Kueue tier's latest run,
  from ``kueue.json`` (``build/kueue.sh --record``).
- ``kube-versions`` (docs/performance.md): per Kubernetes release, the
  spec latency after the last member Running (50 × 8 on kwok) and the
  file-mode delivery on the real node, from ``figures/kube/``.
- ``optin`` (docs/performance.md): what each opt-in suite would add to CI,
  its addon's build and its tests (``optin.json``, ``python -m
  tests.bench.optin``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support import scaleblocks

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "tests" / "bench" / "figures"
COMMAND = "python -m tests.support.docblocks --write"

_BLOCK = re.compile(
    r"(?P<open><!-- generated: (?P<name>[\w-]+) \(.*?\) -->\n)(?P<body>.*?)(?P<close><!-- end generated: (?P=name) -->)",
    re.S,
)

Json = Any


def _load(name: str) -> Json:
    return json.loads((FIGURES / name).read_text(encoding="utf-8"))


def _cell(q: Json | None, digits: int = 2) -> str:
    """``p50 / p95 / max`` of a quantiles object, ``-`` when there is none."""
    return "-" if not q else " / ".join(f"{q[k]:.{digits}f}" for k in ("p50", "p95", "max"))


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


# --- the daemon's flags --------------------------------------------------------


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is argparse.SUPPRESS or default is None or default == "":
        return "–"
    if isinstance(action, argparse.BooleanOptionalAction) or action.const is True:
        return "on" if default else "off"
    if isinstance(default, tuple):
        return "–" if not default else f"`{','.join(default)}`" if len(default) <= 3 else f"{len(default)} keys"
    if isinstance(default, float):
        return f"`{default:g}s`"
    return f"`{default}`"


def daemon_flags() -> str:
    """The flag table of ``ring-controller``: one row per option of :func:`ringcontroller.options.parser`."""
    from ringcontroller.options import duration, parser

    lines = ["| flag | default | what it does |", "|---|---|---|"]
    for action in parser()._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or action.dest == "help":
            continue
        flags = [f for f in action.option_strings if f.startswith("--")]
        value = ""
        if action.nargs != 0:
            if action.metavar:
                value = f" {action.metavar}"
            elif action.choices:
                value = " " + "|".join(map(str, action.choices))
            else:
                value = " N" if action.type is int else " DURATION" if action.type is duration else " VALUE"
        shown = " / ".join(f"`{f}{value}`" for f in flags)
        help_text = (action.help or "") % {"default": action.default, "prog": "ring-controller"}
        lines.append(f"| {_escape(shown)} | {_escape(_default(action))} | {_escape(help_text)} |")
    return "\n".join(lines)


# --- DNS probing against ring-controller (vs-dns.json) -------------------------

#: Stage keys of vs-dns.json and delivery-stages.json, as the tables head them.
_STAGES = {
    "pleg": "PLEG",
    "running_seen": "Running+IP seen",
    "registered_seen": "registered seen",
    "spec_completed": "spec completed",
    "touch_seen": "touch seen",
    "spec_seen": "SPEC_SEEN",
    "exec": "TF_CONFIG exported",
    "trainer_start": "train.py start",
}
_RUNTIMES = ("dns", "ring-file", "ring-api", "ring-registered")


def _vs_dns_rows() -> list[Json]:
    rows: list[Json] = _load("vs-dns.json")["by"]
    return rows


def readme_vs_dns() -> str:
    """README's comparison: overhead p50 per runtime at the smallest and largest worker counts, best one bold with its ratio."""
    doc = _load("vs-dns.json")
    rows = doc["by"]
    workers = sorted({r["workers"] for r in rows})
    shown = [workers[0], workers[-1]] if len(workers) > 1 else workers
    runs = {r["runtime"]: r["runs"] for r in rows}
    counts = sorted({r["runs"] for r in rows if r["runtime"] != "dns"})
    per_cell = f"{counts[0]}–{counts[-1]}" if counts[0] != counts[-1] else f"{counts[0]}"
    lines = [
        "Discovery overhead (last worker container started → `TF_CONFIG` exported in",
        "every worker), p50 on the dev cluster's real node, " + f"{per_cell} runs per cell (DNS {runs.get('dns', 0)}):",
        "",
        "| workers | DNS probing | ring-file | ring-api | ring-registered |",
        "|---|---|---|---|---|",
    ]
    for w in shown:
        cells = {r["runtime"]: r["overhead_s"]["p50"] for r in rows if r["workers"] == w}
        best = min((k for k in cells if k != "dns"), key=lambda k: cells[k], default=None)
        ratio = doc["ratio_overhead_p50_by_workers"].get(str(w))
        out = []
        for kind in _RUNTIMES:
            value = cells.get(kind)
            text = "–" if value is None else f"{value:.2f} s"
            if kind == best:
                text = f"**{text}**" + (f" ({ratio}x)" if ratio is not None else "")
            out.append(text)
        lines.append(f"| {w} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def vs_dns_overhead() -> str:
    """Seconds from TrainJob creation per runtime and worker count (p50 / p95 / max)."""
    lines = [
        "| runtime | workers | runs (trained) | last container started (s) | TF_CONFIG exported everywhere (s) "
        "| every worker past step 1 (s) | discovery overhead (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in _vs_dns_rows():
        lines.append(
            f"| {r['runtime']} | {r['workers']} | {r['runs']} ({r['runs_e2e']}) | {_cell(r['last_start_s'])} "
            f"| {_cell(r['exported_s'])} | {_cell(r['first_step_s'])} | {_cell(r['overhead_s'])} |"
        )
    return "\n".join(lines)


def vs_dns_stages() -> str:
    """Seconds after the last container started until every worker passed each stage (p50 / p95 / max)."""
    lines = ["| runtime | workers | " + " | ".join(_STAGES.values()) + " |", "|---|---|" + "---|" * len(_STAGES)]
    for r in _vs_dns_rows():
        after = (r.get("stages") or {}).get("after_start") or {}
        lines.append(f"| {r['runtime']} | {r['workers']} | " + " | ".join(_cell(after.get(k)) for k in _STAGES) + " |")
    return "\n".join(lines)


def _wrapped(text: str) -> str:
    return "\n".join(textwrap.wrap(text, width=76, break_long_words=False, break_on_hyphens=False))


def vs_dns_summary() -> str:
    """The DNS ratio per worker count and the end to end p50s, as one paragraph."""
    doc = _load("vs-dns.json")
    rows = doc["by"]
    workers = sorted({r["workers"] for r in rows})
    best = {}
    for w in workers:
        ring = [r for r in rows if r["workers"] == w and r["runtime"] != "dns"]
        best[w] = min(ring, key=lambda r: r["overhead_s"]["p50"])
    kinds = {r["runtime"] for r in best.values()}
    which = f"{kinds.pop()} in every cell" if len(kinds) == 1 else "per worker count"
    by_workers = doc["ratio_overhead_p50_by_workers"]
    ratios = ", ".join(
        f"{by_workers[str(w)]}x at {w}{' workers' if i == 0 else ''} ({best[w]['overhead_s']['p50']:.2f} s)"
        for i, w in enumerate(w for w in workers if by_workers.get(str(w)) is not None)
    )
    e2e = {
        kind: " / ".join(
            f"{r['first_step_s']['p50']:.1f}"
            for w in workers
            for r in rows
            if r["runtime"] == kind and r["workers"] == w and r.get("first_step_s")
        )
        for kind in _RUNTIMES
    }
    e2e = {kind: text for kind, text in e2e.items() if text}
    trained = sorted({r["runs_e2e"] for r in rows})
    ratio_sentence = (
        f"**Discovery overhead** (TF_CONFIG exported everywhere minus last container started), DNS p50 over "
        f"the best ring-controller p50 ({which}): **{ratios}**. "
        if ratios
        else ""
    )
    sentence = (
        ratio_sentence
        + f"End to end (TrainJob created → every worker past step 1, p50 of {'/'.join(map(str, trained))} trained runs, at {' / '.join(map(str, workers))} "
        "workers): "
        + ", ".join(
            f"{kind} {e2e[kind]} s" for kind in ("dns", "ring-registered", "ring-api", "ring-file") if kind in e2e
        )
        + "."
    )
    return _wrapped(sentence)


def vs_dns_when() -> str:
    """When the runs of ``vs-dns.json`` were made: per runtime, from the first run's creation to the last's (UTC)."""
    runs = _load("vs-dns.json")["runs"]
    spans: dict[tuple[str, str], list[str]] = {}
    for kind in _RUNTIMES:
        created = [r["created"] for r in runs if r["runtime"] == kind]
        if created:
            first, last = (datetime.fromtimestamp(x, tz=UTC) for x in (min(created), max(created)))
            spans.setdefault((first.strftime("%Y-%m-%d %H:%M"), last.strftime("%H:%M")), []).append(kind)
    parts = [f"{' and '.join(kinds)} {start}–{end} UTC" for (start, end), kinds in sorted(spans.items())]
    return _wrapped("Runs made (their creation times in the JSON): " + "; ".join(parts) + ".")


def vs_dns_trainer_split() -> str:
    """Trained against probe runs (``overhead_s_by_trainer``): the cells more than 0.1 s apart, and DNS's range."""
    doc = _load("vs-dns.json")
    apart = []
    for r in doc["by"]:
        both = r.get("overhead_s_by_trainer")
        if both and abs(both["tensorflow"]["p50"] - both["probe"]["p50"]) > 0.1:
            apart.append(
                f"{r['runtime']} at {r['workers']} workers ({both['tensorflow']['p50']:.2f} s trained, "
                f"{both['probe']['p50']:.2f} s probe)"
            )
    dns = [run["overhead_s"] for run in doc["runs"] if run["runtime"] == "dns"]
    text = "Overhead p50 of trained and of probe runs: within 0.1 s of each other in every cell"
    text += (" but " + ", ".join(apart)) if apart else ""
    text += "." + (
        f" DNS over all {len(dns)} runs: {min(dns):.2f}–{max(dns):.2f} s, its two 5 s probe rounds." if dns else ""
    )
    return _wrapped(text)


#: Targets of the comparison (issue 24): (what, runtime, workers, figure, quantile, bound).
_VS_DNS_TARGETS = (
    ("self-registration overhead p50 <= 0.25 s", "ring-registered", None, "overhead_s", "p50", 0.25),
    ("self-registration overhead p95 <= 0.5 s", "ring-registered", None, "overhead_s", "p95", 0.5),
    ("DNS ratio >= 50x at 2 workers", "ratio", 2, None, None, 50.0),
    ("DNS ratio >= 40x at 8 workers", "ratio", 8, None, None, 40.0),
    ("file mode overhead p50 <= 1.0 s at 8 workers", "ring-file", 8, "overhead_s", "p50", 1.0),
)


def vs_dns_targets() -> str:
    """Each target of the comparison, met or missed as the committed JSON says (a bound is met only within it)."""
    doc = _load("vs-dns.json")
    rows = doc["by"]
    lines = []
    for what, kind, workers, figure, q, bound in _VS_DNS_TARGETS:
        if kind == "ratio":
            value = doc["ratio_overhead_p50_by_workers"].get(str(workers))
            ok = value is not None and value >= bound
            shown = f"{value}x"
        else:
            cells = [r for r in rows if r["runtime"] == kind and (workers is None or r["workers"] == workers)]
            values = [r[figure][q] for r in cells]
            ok = bool(values) and all(v <= bound for v in values)
            shown = " / ".join(f"{v:.2f}" for v in values) + " s"
            if workers is None:
                shown += " at " + " / ".join(str(r["workers"]) for r in cells) + " workers"
        verdict = "met" if ok else "missed" if shown not in ("Nonex", " s") else "not measured"
        lines.append(f"- {what}: **{verdict}** ({shown})" if verdict != "not measured" else f"- {what}: not measured")
    return "\n".join(lines)


def delivery_stages() -> str:
    """Spec completed → TF_CONFIG in a replacement pod per delivery mode, and the replacement's stages."""
    modes = _load("delivery-stages.json")["modes"]
    lines = [
        "| mode | spec completed → TF_CONFIG in the new pod, p50 / p95 / max (s) "
        "| → new epoch in the file of the pod that stayed, p50 / max (s) |",
        "|---|---|---|",
    ]
    for m in modes:
        stayed = "–" if m.get("survivor_p50_s") is None else f"{m['survivor_p50_s']:.3f} / {m['survivor_max_s']:.3f}"
        lines.append(f"| {m['mode']} | {m['p50_s']:.3f} / {m['p95_s']:.3f} / {m['max_s']:.3f} | {stayed} |")
    keys = [k for k in _STAGES if k != "registered_seen"]
    labels = {**_STAGES, "trainer_start": "program start"}
    lines += [
        "",
        "The replacement's stages, seconds after its container started (p50 / p95 / max):",
        "",
        "| mode | " + " | ".join(labels[k] for k in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for m in modes:
        lines.append(f"| {m['mode']} | " + " | ".join(_cell(m["stages"].get(k), 3) for k in keys) + " |")
    return "\n".join(lines)


def delivery_touch() -> str:
    """The touch or not, from ``delivery.json``: TF_CONFIG in the new pod, and the new epoch in the pod that stayed."""
    names = {"file+touch": "file, `--touch-pods` (default)", "file": "file, `--no-touch-pods`", "api": "`--from-api`"}
    lines = [
        "| mode | → TF_CONFIG exported in the new pod, p50 / max | "
        "→ new epoch in the mounted file of the pod that stayed, p50 / max |",
        "|---|---|---|",
    ]
    for m in _load("delivery.json")["modes"]:
        stayed = (
            "–" if m.get("survivor_p50_s") is None else f"{m['survivor_p50_s']:.2f} s / {m['survivor_max_s']:.2f} s"
        )
        lines.append(f"| {names.get(m['mode'], m['mode'])} | {m['p50_s']:.2f} s / {m['max_s']:.2f} s | {stayed} |")
    return "\n".join(lines)


def superpod() -> str:
    """Rank tables at super-pod scale, one row per shape of ``superpod.json`` (CPU ms: render, ctl cpu, decode)."""
    lines = [
        "| shape | table | NPUs | plain B | stored B | render ms | ctl cpu ms | running->completed ms "
        "| ctl latency ms | decode ms | launch ms | RSS MB | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in _load("superpod.json")["rows"]:
        stored = f"{r['stored_bytes']:,}" + (" gz" if r["compressed"] else "")
        cells = [
            r["shape"],
            r["table"],
            f"{r['npus']:,}",
            f"{r['plain_bytes']:,}",
            stored,
            *(f"{r[k]:.0f}" for k in ("render_ms", "controller_cpu_ms", "latency_ms", "controller_latency_ms")),
            *(f"{r[k]:.0f}" for k in ("decode_ms", "launch_ms", "controller_rss_mb")),
            f"{r['load_avg_1m']:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def superpod_targets() -> str:
    """Issue 25's targets against ``superpod.json``: met only within the bound."""
    rows = _load("superpod.json")["rows"]

    def verdict(ok: bool) -> str:
        return "**met**" if ok else "**missed**"

    big = [r for r in rows if r["npus"] >= 16384 or r["shape"].startswith("a5-")]
    lines = [
        "- spec completed at most 1 s after the last member Running, at 16,384 NPUs and for the A5 super pod: "
        + verdict(bool(big) and all(r["latency_ms"] <= 1000 for r in big))
        + " ("
        + ", ".join(f"{r['shape']} {r['latency_ms']:.0f} ms" for r in big)
        + ")",
        "- launcher decode at most 200 ms: "
        + verdict(all(r["decode_ms"] <= 200 for r in rows))
        + f" (at most {max(r['decode_ms'] for r in rows):.0f} ms)",
        "- controller RSS at most 300 MB: "
        + verdict(all(r["controller_rss_mb"] <= 300 for r in rows))
        + f" ({min(r['controller_rss_mb'] for r in rows):.0f}-{max(r['controller_rss_mb'] for r in rows):.0f} MB)",
    ]
    return "\n".join(lines)


def topology() -> str:
    """Rack and spine edges summed over the jobs of ``topology.json``, per placement: spec order, topology order, minimum."""
    doc = _load("topology.json")
    names = {
        "rack": "spread over racks, then hosts (`--spread rack`)",
        "host": "spread over hosts only (`--spread host`)",
    }
    lines = [
        "| placement | rack edges spec / topology / minimum | spine edges spec / topology / minimum |",
        "|---|---|---|",
    ]
    for spread, name in names.items():
        jobs = doc[spread]
        sums = [
            " / ".join(str(sum(j[k][level] for j in jobs)) for k in ("spec", "topology", "minimum")) for level in (0, 1)
        ]
        lines.append(f"| {name} | {sums[0]} | {sums[1]} |")
    return "\n".join(lines)


def topology_effect() -> str:
    """Medians of the ring all-reduce per rank order, from ``topology-effect.json``."""
    doc = _load("topology-effect.json")
    rows = {
        "racks2": "2 (4 + 4 nodes)",
        "racks4": "4 (2 + 2 + 2 + 2)",
        "control_unshaped": "2, no shaping (control)",
    }
    lines = [
        "| racks | rack-crossing edges spec / topology | all-reduce spec | all-reduce topology | ratio |",
        "|---|---|---|---|---|",
    ]
    for key, name in rows.items():
        run = doc[key]
        spec, topo = (statistics.median(run[order]["steps"]) for order in ("spec", "topology"))
        lines.append(
            f"| {name} | {run['spec']['rack_edges']} / {run['topology']['rack_edges']} | {spec:.3f} s "
            f"| {topo:.3f} s | {spec / topo:.2f} |"
        )
    return "\n".join(lines)


def second_network() -> str:
    """Bytes each worker sent per interface while training over the second network, from ``second-network.json``."""
    doc = _load("second-network.json")
    lines = [
        f"{doc['workers']} TensorFlow workers, {doc['steps']} steps, `ring-controller.io/network: {doc['network']}`, "
        f"{doc['ip_family']} cluster (`{doc['command']}`, {doc['date']}):",
        "",
        "| worker | bytes sent on eth0 (cluster network) | bytes sent on eth1 (second network) |",
        "|---|---|---|",
    ]
    for worker, sent in sorted(doc["tx_bytes"].items()):
        lines.append(f"| {worker} | {sent['eth0']:,} | {sent['eth1']:,} |")
    return "\n".join(lines)


def network_effect() -> str:
    """The all-reduce on each network with one bridge shaped, from ``network-effect.json``: time and bytes sent."""
    doc = _load("network-effect.json")
    load = doc["load"]
    lines = [
        f"{doc['workers']} pods on the real node, {doc['mbytes']:g} MB float32 ring all-reduce, {doc['steps']} steps "
        f"per job; every port of the shaped bridge limited to {doc['rate']} by `htb`; {doc['ip_family']} cluster "
        f"(`{doc['command']}`, {doc['date']}, load {load['before'][0]:g} before, {load['after'][0]:g} after):",
        "",
        "| shaped | job's network | interface in the spec | median all-reduce | sent on eth0, all pods | "
        "sent on eth1, all pods |",
        "|---|---|---|---|---|---|",
    ]
    names = {"primary": "pod network (`ringbr0`)", "second": "second network (`ringbr1`)", "none": "nothing"}
    for r in doc["runs"]:
        eth0, eth1 = (sum(b[i] for b in r["tx_bytes"].values()) for i in ("eth0", "eth1"))
        network = f"`{r['network']}`" if r["network"] else "pod network"
        lines.append(
            f"| {names[r['shaped']]} | {network} | {r['interface']} | {r['median_s']:.3f} s "
            f"| {eth0 / 1e6:,.1f} MB | {eth1 / 1e6:,.1f} MB |"
        )
    return "\n".join(lines)


def network_overhead() -> str:
    """Discovery overhead on the second network beside the pod network, from ``network-overhead.json``."""
    doc = _load("network-overhead.json")
    runs = doc["runs"]
    start, end = (datetime.fromtimestamp(f(r["created"] for r in runs), UTC) for f in (min, max))
    loads = [r["load1"] for r in runs]
    lines = [
        f"`{doc['command']}`, {len(runs)} runs {start:%Y-%m-%d %H:%M}–{end:%H:%M} UTC, load {min(loads):g}–"
        f"{max(loads):g} (1-minute, at each run's start). Seconds after the last container started "
        "(p50 / p95 / max):",
        "",
        "| runtime | workers | listed on | runs | spec completed | TF_CONFIG exported everywhere (discovery overhead) |",
        "|---|---|---|---|---|---|",
    ]
    for row in doc["by"]:
        kind, _, network = row["runtime"].partition(" on ")
        after = (row.get("stages") or {}).get("after_start") or {}
        lines.append(
            f"| {kind} | {row['workers']} | {f'`{network}`' if network else 'pod network'} | {row['runs']} "
            f"| {_cell(after.get('spec_completed'))} | {_cell(row['overhead_s'])} |"
        )
    return "\n".join(lines)


def kueue_tier() -> str:
    """The Kueue tier's latest run (``kueue.json``): when, the command, build/up/test times, each test's outcome."""
    doc = _load("kueue.json")
    versions = ", ".join(f"{k} {v}" for k, v in doc["versions"].items())
    built = ", ".join(f"{k} {v}" for k, v in doc["built"].items())
    seconds = doc["seconds"]
    lines = [
        f"`{doc['command']}`, {doc['date']} ({versions}): **{doc['outcome']}**, {doc['passed']} passed, "
        f"{doc['failed']} failed, {doc['errors']} errors, {doc['skipped']} skipped. Build step "
        f"{seconds['build']} s ({built}), `up` {seconds['up']} s, tests {seconds['tests']} s.",
    ]
    for name, last in doc.get("last_build", {}).items():
        if doc["built"].get(name) == "cached":
            lines.append(f"Last build of {name}: {last['time']} (`{last['command']}`, {last['date']}).")
    lines += [
        "",
        "| test | outcome | seconds |",
        "|---|---|---|",
    ]
    lines += [f"| `{t['name']}` | {t['outcome']} | {t['seconds']:.1f} |" for t in doc["tests"]]
    return "\n".join(lines)


# --- per Kubernetes release ------------------------------------------------------

KUBE_FIGURES = FIGURES / "kube"


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def _load_avg(machine: Json) -> str:
    start, end = machine["load_avg_start"][0], machine["load_avg_end"][0]
    return f"load {start:g} → {end:g} on {machine['cpus']} CPUs"


def _runs(pattern: str) -> dict[str, list[Json]]:
    """The documents of ``figures/kube/PATTERN`` by their ``kube``, each release's in order of their ``date``."""
    runs: dict[str, list[Json]] = {}
    for path in sorted(KUBE_FIGURES.glob(pattern)):
        doc = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault(doc["kube"], []).append(doc)
    return {k: sorted(v, key=lambda d: d["date"]) for k, v in runs.items()}


def _bench_cells(doc: Json | None) -> list[str]:
    if doc is None:
        return ["not measured", "–"]
    q = doc["latency_ms"]
    return [
        f"{q['p50']:.0f} / {q['p90']:.0f} / {q['max']:.0f}, {q['count']}",
        f"`{doc['scenario']['command']}`, {doc['date']}, {_load_avg(doc['machine'])}",
    ]


def _delivery_cells(doc: Json | None) -> list[str]:
    mode = next((m for m in doc["modes"] if m["mode"] == "file+touch"), None) if doc is not None else None
    if doc is None or mode is None:
        return ["not measured", "–", "–"]
    return [
        f"{mode['p50_s']:.3f} / {mode['p95_s']:.3f} / {mode['max_s']:.3f}, {len(mode['samples'])}",
        f"{mode['survivor_p50_s']:.3f} / {mode['survivor_max_s']:.3f}" if mode["survivor_samples"] else "–",
        f"`{doc['command']}`, {doc['date']}, {_load_avg(doc['machine'])}",
    ]


def kube_versions() -> str:
    """Per Kubernetes release of ``figures/kube/``: the spec latency after the last member Running (``bench-*.json``,
    ``build/bench.sh --jobs 50 --pods 8 --kube V``) and the file-mode delivery on the real node (``delivery-*.json``),
    side by side, each with its command, date and the machine's 1-minute load average at its start and end; one row
    per run (a release's n-th bench run beside its n-th delivery run), every run shown."""
    bench, delivery = _runs("bench-*.json"), _runs("delivery-*.json")
    lines = [
        "| Kubernetes | spec latency after the last member Running, p50 / p90 / max (ms), jobs | run "
        "| file mode: spec completed → TF_CONFIG in the new pod, p50 / p95 / max (s), replacements "
        "| → new epoch in the file of the pod that stayed, p50 / max (s) | run |",
        "|---|---|---|---|---|---|",
    ]
    for version in sorted({*bench, *delivery}, key=_release_key):
        for b, d in itertools.zip_longest(bench.get(version, []), delivery.get(version, [])):
            cells = [version, *_bench_cells(b), *_delivery_cells(d)]
            lines.append("| " + " | ".join(_escape(c) for c in cells) + " |")
    return "\n".join(lines)


def ci_cold() -> str:
    """CI's clock: fresh-cache ``.ci/run`` runs, step by step, with the Go builds inside the ``up`` steps."""
    doc = _load("ci-cold.json")

    def clock(seconds: int) -> str:
        return f"{seconds // 60}m{seconds % 60:02d}s"

    lines: list[str] = []
    for run in doc["runs"]:
        lines += [
            f"`{run['command']}` on {run['machine']}, at {run['commit']}, {run['started'][:16].replace('T', ' ')} UTC: "
            f"{run['outcome']} in {clock(run['seconds'])} ({run['tests']['passed']:,} tests passed; {run['note']}):",
            "",
            "| step | took |",
            "|---|---|",
            *(f"| {step['step']} | {clock(step['seconds'])} |" for step in run["steps"]),
            "",
            "The Go builds inside those steps: "
            + ", ".join(f"{b['module']} {b['version']} {b['time']}" for b in run["builds"])
            + ".",
            "",
        ]
    before = doc["before"]
    lines.append(
        f"Before: {before['minutes']} minutes on {before['date']} ("
        + ", ".join(f"{k} {v}" for k, v in before["steps"].items())
        + ")."
    )
    return "\n".join(lines)


#: Block name -> its renderer.
def _optin_build(b: dict[str, Any]) -> str:
    """The build cell of an opt-in suite: its addon's Go build, or (``kind: image``) its image's."""
    load = f"load {b['load_before']:g} to {b['load_after']:g}; {b['date'][:10]}"
    if b.get("kind") == "image":
        wheels = "from the wheel cache" if b["wheels_cached"] else f"wheels downloaded in {b['wheels_s']:.0f} s"
        root = "the cached bookworm root" if b["root_cached"] else "the bookworm root made too"
        return (
            f"image: {b['wall_s'] / 60:.1f} min wall, {b['cpu_s'] / 60:.1f} CPU-min; {wheels} "
            f"({b['wheels_bytes'] / 1e9:.1f} GB), installed on {root} by {b['installed_s']:.0f} s "
            f"({b['installed']}), packed and imported by {b['total_s']:.0f} s ({load})"
        )
    cache = "an empty Go build cache" if b["gocache"] == "empty" else "this machine's Go build cache"
    return (
        f"{b['wall_s'] / 60:.1f} min wall, {b['cpu_s'] / 60:.1f} CPU-min, "
        f"{b['packages']:,} packages compiled, from {cache} ({load})"
    )


def _optin_image(t: dict[str, Any]) -> str:
    """After an image suite's cluster start: its image built into that cluster (not in the total: the build is)."""
    if "image_s" not in t:
        return ""
    wheels = "cached wheels" if t.get("image_wheels_cached") else "wheels downloaded"
    return f" (then the image from {wheels}: {t['image_s']:.0f} s, not in the total)"


def optin() -> str:
    """One row per opt-in suite of ``optin.json``: its addon's build (and with which Go build cache) or its image's,
    its cluster's start and its tests, with dates."""
    rows = [
        "| suite | addon or image build | cluster up | tests | total |",
        "|---|---|---|---|---|",
    ]
    for name, doc in sorted(_load("optin.json").items()):
        b, t = doc["build"], doc["tests"]
        total = b["wall_s"] + t["up_s"] + t["pytest_s"]
        rows.append(
            f"| `{name}` ({b['version']}) | {_optin_build(b)} | {t['up_s']:.0f} s{_optin_image(t)} | {t['pytest_s']:.0f} s, "
            f"{t['passed']} passed, {t['outcome']} ({t['date'][:10]}) | {total / 60:.1f} min |"
        )
    return "\n".join(rows)


BLOCKS: dict[str, Callable[[], str]] = {
    "daemon-flags": daemon_flags,
    "readme-vs-dns": readme_vs_dns,
    "vs-dns-overhead": vs_dns_overhead,
    "vs-dns-stages": vs_dns_stages,
    "vs-dns-summary": vs_dns_summary,
    "vs-dns-when": vs_dns_when,
    "vs-dns-trainer-split": vs_dns_trainer_split,
    "vs-dns-targets": vs_dns_targets,
    "delivery-stages": delivery_stages,
    "delivery-touch": delivery_touch,
    "superpod": superpod,
    "superpod-targets": superpod_targets,
    "topology": topology,
    "topology-effect": topology_effect,
    "second-network": second_network,
    "network-effect": network_effect,
    "network-overhead": network_overhead,
    **scaleblocks.BLOCKS,
    "kueue-tier": kueue_tier,
    "optin": optin,
    "ci-cold": ci_cold,
    "kube-versions": kube_versions,
}


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may hold blocks: README.md and every ``docs/*.md``."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks_in(text: str) -> list[tuple[str, str]]:
    """``(name, body)`` of every block in ``text``, in order."""
    return [(m.group("name"), m.group("body")) for m in _BLOCK.finditer(text)]


def rendered(text: str, blocks: dict[str, Callable[[], str]] = BLOCKS) -> str:
    """``text`` with every block's body replaced by its renderer's output (unknown names raise KeyError)."""
    return _BLOCK.sub(lambda m: m.group("open") + blocks[m.group("name")]() + "\n" + m.group("close"), text)


def stale(root: Path = ROOT) -> list[str]:
    """``page: block`` for every block whose body differs from its rendering; empty when all are current."""
    out = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        fresh = dict(blocks_in(rendered(text)))
        for name, body in blocks_in(text):
            if body != fresh[name]:
                out.append(f"{page.relative_to(root)}: {name}")
    return out


def main(argv: list[str] | None = None) -> int:
    """``--write``: rewrite every block; else list the stale ones and exit 1 if there are any."""
    p = argparse.ArgumentParser(prog="python -m tests.support.docblocks", description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite the blocks in place")
    args = p.parse_args(argv)
    if args.write:
        for page in pages():
            text = page.read_text(encoding="utf-8")
            new = rendered(text)
            if new != text:
                page.write_text(new, encoding="utf-8")
                print(f"rewrote {page.relative_to(ROOT)}")
        return 0
    problems = stale()
    for line in problems:
        print(f"stale: {line} ({COMMAND})", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
