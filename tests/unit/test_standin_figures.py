"""docs/performance.md shows the stand-ins' figures of record as tests/bench/figures/standins.json holds them."""

from __future__ import annotations

import json

from tests.bench.standins import standin_table
from tests.support.clients import REPO


def test_the_stand_in_table_is_the_committed_figures() -> None:
    figures = json.loads((REPO / "tests" / "bench" / "figures" / "standins.json").read_text(encoding="utf-8"))
    page = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    assert standin_table(figures) in page
    assert f"tree at\n{figures['commit']}, {figures['date']}" in page and figures["command"] in page
    kept = {name for name, row in figures["variants"].items() if row.get("meets_rule") and name != "all"}
    assert kept == {"dataclasses"}  # what ranktable/ keeps; the rest was removed by the rule
