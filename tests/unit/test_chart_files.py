"""The Helm chart's own files, read as plain data (no helm): the copies it ships, its version, its values' schema.

What only the real helm and kubectl can check (rendering, lint, kustomize)
is in tests/tools/test_chart.py.
"""

from __future__ import annotations

import json

import pytest
import yaml

from model.keys import DEFAULT_LABEL_KEY, DEFAULT_PORT
from ranktable.hccl import DEFAULT_CHOICE
from ringcontroller.options import VERSION
from ringcontroller.options import parser as options_parser
from tests.support.charts import CHART, REPO, shipped


@pytest.mark.parametrize("name", ["monitoring.yaml", "grafana-dashboard.json"])
def test_chart_files_are_the_shipped_files(name: str) -> None:
    copy = CHART / "files" / name
    assert copy.read_bytes() == (REPO / "build" / name).read_bytes(), (
        f"{copy} differs from build/{name}: cp build/{name} {copy}"
    )


def test_chart_version_is_the_controllers() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == VERSION
    (deployment,) = [d for d in shipped("ring-controller.yaml") if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ring-controller:{VERSION}"


def test_values_schema_and_comments_follow_the_daemons_flags() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    actions = {a.dest: a for a in options_parser()._actions}
    assert set(schema["rankTableVersion"]["enum"]) == {"", *actions["ranktable_version"].choices}
    assert set(schema["logFormat"]["enum"]) == set(actions["log_format"].choices)
    assert set(schema["logLevel"]["enum"]) == set(actions["log_level"].choices)
    # Empty values leave the daemon's default, which the comment names.
    lines = {line.split(":")[0]: line for line in (CHART / "values.yaml").read_text().splitlines()}
    assert lines["labelKey"].endswith(f"# {DEFAULT_LABEL_KEY}")
    assert lines["defaultPort"].endswith(f"# {DEFAULT_PORT}")
    assert lines["rankTableVersion"].endswith(f"# {DEFAULT_CHOICE}")
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["workers"] == actions["workers"].default
