"""The Kubernetes version matrix (tests/bench/matrix.py): README.md's table is the committed JSON's rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import matrix

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="{errors}" failures="{failures}" skipped="{skipped}" tests="{tests}" time="300.0">
</testsuite></testsuites>
"""


def junit(tmp_path: Path, *, tests: int, failures: int = 0, errors: int = 0, skipped: int = 0) -> Path:
    path = tmp_path / "report.xml"
    path.write_text(JUNIT.format(tests=tests, failures=failures, errors=errors, skipped=skipped))
    return path


def test_the_readme_table_is_the_rendering_of_the_committed_json() -> None:
    doc = json.loads(matrix.FIGURES.read_text())
    section = matrix.readme_section(matrix.README.read_text())
    assert section == matrix.render_table(doc), "run: python -m tests.bench.matrix readme"
    for entry in doc["results"]:
        assert entry["tier"] in matrix.TIERS
        assert entry["outcome"] in ("passed", "failed", "not run")
        assert entry["outcome"] != "not run" or entry["note"], "a tier not run says why"


def test_counts_come_from_the_junit_report(tmp_path: Path) -> None:
    counts = matrix.junit_counts(junit(tmp_path, tests=92, failures=2, errors=1, skipped=1))
    assert counts == {"passed": 88, "failed": 2, "errors": 1, "skipped": 1}


@pytest.mark.parametrize(
    ("counts", "code", "expected"),
    [
        ({"passed": 92, "failed": 0, "errors": 0, "skipped": 0}, 0, "passed"),
        ({"passed": 91, "failed": 0, "errors": 0, "skipped": 1}, 0, "failed"),  # a skip fails the run
        ({"passed": 91, "failed": 1, "errors": 0, "skipped": 0}, 1, "failed"),
        ({"passed": 0, "failed": 0, "errors": 0, "skipped": 0}, 5, "failed"),  # no test ran
        ({"passed": 92, "failed": 0, "errors": 0, "skipped": 0}, 2, "failed"),  # interrupted
    ],
)
def test_only_a_clean_run_passes(counts: dict[str, int], code: int, expected: str) -> None:
    assert matrix.outcome(counts, exit_code=code) == expected


def test_a_new_result_replaces_the_old_one_of_its_version_and_tier() -> None:
    base = {"kube": "v1.32.13", "tier": "integration", "outcome": "failed", "passed": 1, "seconds": 60}
    later = {**base, "outcome": "passed", "passed": 92, "date": "2026-12-03"}
    other = {**base, "kube": "v1.37.2"}
    doc = matrix.record(matrix.record(matrix.record({}, other), base), later)
    assert [(r["kube"], r["outcome"]) for r in doc["results"]] == [("v1.32.13", "passed"), ("v1.37.2", "failed")]


def test_versions_sort_numerically_and_cells_say_why_a_tier_did_not_run() -> None:
    entries = [
        {"kube": "v1.37.2", "tier": "integration", "outcome": "passed", "passed": 92, "failed": 0, "errors": 0,
         "skipped": 0, "seconds": 300, "date": "2026-12-03", "command": "build/matrix.sh"},
        {"kube": "v1.9.1", "tier": "workloads", "outcome": "not run", "note": "the real node is taken",
         "command": "build/matrix.sh"},
    ]  # fmt: skip
    table = matrix.render_table({"results": entries})
    rows = table.splitlines()
    assert rows[0].startswith("| Kubernetes (`build/matrix.sh`) |")
    assert rows[2].startswith("| v1.9.1 |") and rows[3].startswith("| v1.37.2 |")
    assert "not run: the real node is taken" in rows[2]
    assert "**passed**: 92 passed (2026-12-03)" in rows[3]
    assert rows[3].endswith("| not run |")


def test_the_check_fails_on_a_stale_readme(tmp_path: Path) -> None:
    figures = tmp_path / "m.json"
    figures.write_text(json.dumps({"results": []}))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{matrix.BEGIN}\n| stale |\n{matrix.END}\n")
    assert matrix.main(["--json", str(figures), "readme", "--check", "--readme", str(readme)]) == 1
    assert matrix.main(["--json", str(figures), "readme", "--readme", str(readme)]) == 0
    assert matrix.main(["--json", str(figures), "readme", "--check", "--readme", str(readme)]) == 0
