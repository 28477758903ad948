"""The generated blocks of the docs match what generates them (tests/support/docblocks.py).

Figures of record come from the committed JSON under ``tests/bench/figures/``
and the daemon's flag table from ``ring-controller``'s own parser: when
either changes, ``python -m tests.support.docblocks --write`` rewrites the
blocks, and this test fails until it has.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ringcontroller.options import parser
from tests.support import docblocks

ROOT = docblocks.ROOT
OPERATING = ROOT / "docs" / "operating.md"


def test_every_block_matches_its_source() -> None:
    assert docblocks.stale() == [], f"run `{docblocks.COMMAND}` and commit the docs"


def test_every_renderer_has_exactly_one_block() -> None:
    names = [name for page in docblocks.pages() for name, _ in docblocks.blocks_in(page.read_text(encoding="utf-8"))]
    assert sorted(names) == sorted(docblocks.BLOCKS)


def test_every_flag_of_the_parser_is_in_the_operating_guide() -> None:
    """Independent of the renderer: each long option of ``ring-controller --help`` heads a row of the flag table."""
    (body,) = [b for n, b in docblocks.blocks_in(OPERATING.read_text(encoding="utf-8")) if n == "daemon-flags"]
    rows = {line.split("|")[1].strip() for line in body.splitlines() if line.startswith("| `--")}
    documented = {word.strip("`") for row in rows for word in row.split() if word.startswith("`--")}
    flags = {f for a in parser()._actions for f in a.option_strings if f.startswith("--") and f != "--help"}
    assert flags - documented == set(), "flags missing from docs/operating.md"
    assert documented - flags == set(), "docs/operating.md documents flags the parser lacks"
    assert {"--shutdown-timeout", "--leader-election-id"} <= documented


def test_a_removed_row_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    text = OPERATING.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `--shutdown-timeout"))
    (tmp_path / "docs" / "operating.md").write_text(text.replace(row + "\n", ""), encoding="utf-8")
    (tmp_path / "README.md").write_text("# x\n", encoding="utf-8")
    assert docblocks.stale(tmp_path) == ["docs/operating.md: daemon-flags"]


def test_write_restores_a_block() -> None:
    text = "a\n<!-- generated: daemon-flags (x) -->\nold\n<!-- end generated: daemon-flags -->\nb\n"
    fresh = docblocks.rendered(text)
    assert fresh.startswith("a\n<!-- generated: daemon-flags (x) -->\n| flag |")
    assert fresh.endswith("\n<!-- end generated: daemon-flags -->\nb\n")
    assert docblocks.rendered(fresh) == fresh


def _vs_dns_with(monkeypatch: pytest.MonkeyPatch, runtime: str, workers: int, p50: float) -> None:
    doc: Any = json.loads((docblocks.FIGURES / "vs-dns.json").read_text(encoding="utf-8"))
    for row in doc["by"]:
        if row["runtime"] == runtime and row["workers"] == workers:
            row["overhead_s"]["p50"] = p50
    monkeypatch.setattr(docblocks, "_load", lambda name: doc)


@pytest.mark.parametrize(("p50", "verdict"), [(1.0, "met"), (1.004, "missed"), (1.28, "missed")])
def test_a_target_is_met_only_within_its_bound(monkeypatch: pytest.MonkeyPatch, p50: float, verdict: str) -> None:
    """The JSON decides: a figure over the bound by any amount is a miss (1.004 s against 1.0 s)."""
    _vs_dns_with(monkeypatch, "ring-file", 8, p50)
    (line,) = [x for x in docblocks.vs_dns_targets().splitlines() if x.startswith("- file mode")]
    assert f"**{verdict}**" in line


def test_a_new_figure_changes_the_front_page(monkeypatch: pytest.MonkeyPatch) -> None:
    _vs_dns_with(monkeypatch, "ring-file", 8, 0.93)
    assert "| 8 | 10.07 s | 0.93 s | 0.78 s | **0.57 s** (17.5x) |" in docblocks.readme_vs_dns()


def test_a_comparison_without_dns_runs_renders_what_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-run of two runtimes only (``--runtimes ring-registered,ring-api``) renders them and no ratio."""
    doc: Any = json.loads((docblocks.FIGURES / "vs-dns.json").read_text(encoding="utf-8"))
    doc["runs"] = [r for r in doc["runs"] if r["runtime"] in ("ring-registered", "ring-api")]
    doc["by"] = [r for r in doc["by"] if r["runtime"] in ("ring-registered", "ring-api")]
    doc["ratio_overhead_p50_by_workers"] = {w: None for w in doc["ratio_overhead_p50_by_workers"]}
    monkeypatch.setattr(docblocks, "_load", lambda name: doc)
    assert "| 8 | – | – | 0.78 s | **0.57 s** |" in docblocks.readme_vs_dns()
    assert docblocks.vs_dns_summary().startswith("End to end")
    assert "DNS" not in docblocks.vs_dns_trainer_split()
    assert "ring-api and ring-registered 2026-12-03" in " ".join(docblocks.vs_dns_when().split())
    assert "dns" not in docblocks.vs_dns_overhead() + docblocks.vs_dns_stages()
    targets = docblocks.vs_dns_targets().splitlines()
    assert "- DNS ratio >= 50x at 2 workers: not measured" in targets
    assert "- file mode overhead p50 <= 1.0 s at 8 workers: not measured" in targets
    # Measured without DNS runs, the self-registration target still gets its verdict (whichever it is).
    assert targets[0].startswith("- self-registration overhead p50 <= 0.25 s: **") and "not measured" not in targets[0]


def _kube_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    machine = {"cpus": 2, "load_avg_start": [1.5, 1.0, 1.0], "load_avg_end": [2.25, 1.0, 1.0]}
    bench = {
        "kube": "v1.10.1",
        "date": "2026-12-03 14:00 UTC",
        "scenario": {"command": "build/bench.sh --jobs 50 --pods 8 --kube 1.10"},
        "latency_ms": {"count": 50, "p50": 210.4, "p90": 650.6, "p99": 900.0, "max": 900.2},
        "machine": machine,
    }
    file_mode = {"mode": "file+touch", "samples": [1.0, 1.2], "p50_s": 1.1, "p95_s": 1.19, "max_s": 1.2}
    delivery = {
        "kube": "v1.9.3",
        "date": "2026-12-03 14:10 UTC",
        "command": "build/bench.sh --delivery --modes file+touch",
        "machine": machine,
        "modes": [{**file_mode, "survivor_samples": [0.2], "survivor_p50_s": 0.2, "survivor_max_s": 0.2}],
    }
    (tmp_path / "bench-50x8-v1.10.1.json").write_text(json.dumps(bench))
    (tmp_path / "delivery-v1.9.3.json").write_text(json.dumps(delivery))
    monkeypatch.setattr(docblocks, "KUBE_FIGURES", tmp_path)
    return tmp_path


def test_releases_sort_by_number_and_a_missing_measurement_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _kube_figures(tmp_path, monkeypatch)
    rows = [line for line in docblocks.kube_versions().splitlines() if line.startswith("| v1.")]
    assert [row.split(" | ")[0] for row in rows] == ["| v1.9.3", "| v1.10.1"]
    assert "not measured" in rows[0].split(" | ")[1]  # 1.9 has delivery figures only
    assert "1.100 / 1.190 / 1.200, 2" in rows[0] and "0.200 / 0.200" in rows[0]
    assert "210 / 651 / 900, 50" in rows[1] and "load 1.5 → 2.25 on 2 CPUs" in rows[1]
    assert rows[1].endswith("| not measured | – | – |")


def test_every_run_of_a_release_is_a_row_in_date_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = _kube_figures(tmp_path, monkeypatch)
    first = json.loads((figures / "bench-50x8-v1.10.1.json").read_text())
    later = {**first, "date": "2026-12-03 15:00 UTC", "latency_ms": {**first["latency_ms"], "p50": 400.0}}
    (figures / "bench-50x8-v1.10.1-again.json").write_text(json.dumps(later))
    (figures / "bench-50x8-v1.10.1.json").rename(figures / "bench-50x8-v1.10.1-z.json")  # name order is not date order
    rows = [line for line in docblocks.kube_versions().splitlines() if line.startswith("| v1.10.1")]
    assert [row.split(" | ")[1] for row in rows] == ["210 / 651 / 900, 50", "400 / 651 / 900, 50"]
