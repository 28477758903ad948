"""The alert rules of build/monitoring.yaml, checked and unit-tested by promtool.

The PrometheusRule's groups are extracted by the dev cluster's own code
(``ringdevcluster.prometheus.rule_groups``, what its Prometheus loads), never
copied by hand, into ``rules.yaml`` beside a copy of
tests/tools/promtool/alerts_test.yaml, whose input series make every alert
fire when it should and stay silent on a healthy deployment.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringdevcluster import prometheus as prom
from tests.support import promtool

pytestmark = pytest.mark.tools

TESTS = Path(__file__).resolve().parent / "promtool" / "alerts_test.yaml"


def _alerts() -> list[dict[str, Any]]:
    groups = prom.rule_groups(prom.load_monitoring()["PrometheusRule"])["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def _extract(directory: Path) -> Path:
    rules = prom.rule_groups(prom.load_monitoring()["PrometheusRule"])
    (directory / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copyfile(TESTS, directory / TESTS.name)
    return directory / TESTS.name


def test_promtool_checks_the_shipped_rules(tmp_path: Path) -> None:
    _extract(tmp_path)
    proc = promtool.run("check", "rules", tmp_path / "rules.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in proc.stdout


def test_promtool_unit_tests_of_every_alert_pass(tmp_path: Path) -> None:
    tests = _extract(tmp_path)
    proc = promtool.run("test", "rules", tests.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_is_tested_firing_and_silent() -> None:
    """promtool passes a test of an alert name that does not exist (nothing fires): check the names here."""
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    checks = [c for t in cases for c in t.get("alert_rule_test", [])]
    names = {a["alert"] for a in _alerts()}
    unknown = {c["alertname"] for c in checks} - names
    assert not unknown, f"tests of alerts that build/monitoring.yaml does not define: {sorted(unknown)}"
    firing = {c["alertname"] for c in checks if c.get("exp_alerts")}
    silent = {c["alertname"] for c in checks if not c.get("exp_alerts")}
    assert firing == names, f"alerts never tested firing: {sorted(names - firing)}"
    assert silent == names, f"alerts never tested silent: {sorted(names - silent)}"
    healthy = next(t for t in cases if t["name"] == "healthy")
    assert {c["alertname"] for c in healthy["alert_rule_test"] if not c.get("exp_alerts")} == names


def test_a_broken_rule_fails_promtool(tmp_path: Path) -> None:
    """The harness itself: promtool must reject what it is given when a rule is wrong."""
    tests = _extract(tmp_path)
    rules = yaml.safe_load((tmp_path / "rules.yaml").read_text())
    rule = next(r for r in rules["groups"][0]["rules"] if r["alert"] == "RingControllerSpecIncomplete")
    rule["expr"] = rule["expr"].replace("> 900", "> 9000")  # would never fire in the test's 30 minutes
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    proc = promtool.run("test", "rules", tests.name, cwd=tmp_path)
    assert proc.returncode != 0 and "RingControllerSpecIncomplete" in proc.stdout + proc.stderr
