"""A small client of Prometheus's HTTP API, and the PromQL of build/grafana-dashboard.json and build/monitoring.yaml.

The dev cluster's Prometheus (``ring-devcluster up --with prometheus``) has
no web UI, only the API; the tests read it with the standard library.
:func:`dashboard_queries` lists every panel target's PromQL with Grafana's
variables replaced as Grafana would for that Prometheus (``$__rate_interval``
is ``max($__interval + scrape interval, 4 * scrape interval)``; with a
range step of one scrape interval that is four scrape intervals).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import urllib.parse
import urllib.request
from typing import Any

from tests.support.clients import REPO

Json = dict[str, Any]

DASHBOARD = REPO / "build" / "grafana-dashboard.json"


class PrometheusApi:
    """``GET``/``POST`` on ``/api/v1/...`` of one Prometheus; errors raise AssertionError with its message."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        # A proxy must not see loopback requests (the opener ignores $http_proxy).
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.url}/api/v1/{path}?{query}", timeout=30) as resp:
                body: Json = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
            raise AssertionError(f"Prometheus {path} {params}: HTTP {err.code}: {body.get('error')}") from None
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[Json]:
        """Instant vector result of ``expr`` now."""
        data = self.get("query", query=expr)
        assert data["resultType"] == "vector", f"{expr}: a {data['resultType']}, not an instant vector"
        result: list[Json] = data["result"]
        return result

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> list[Json]:
        """Range (matrix) result of ``expr``."""
        data = self.get("query_range", query=expr, start=start, end=end, step=step)
        result: list[Json] = data["result"]
        return result


def finite(result: list[Json]) -> list[Json]:
    """The series of an instant or range result that have at least one finite value (not NaN, not Inf)."""

    def ok(value: str) -> bool:
        return math.isfinite(float(value))

    return [s for s in result if ("value" in s and ok(s["value"][1])) or any(ok(v) for _, v in s.get("values", []))]


@dataclasses.dataclass(frozen=True)
class PanelQuery:
    """One target of one dashboard panel."""

    panel: str
    ref: str
    expr: str  # as in the dashboard
    kind: str  # the panel type: stat (instant) or timeseries (range)

    def promql(self, *, job: str, namespace: str, rate_interval: str) -> str:
        """``expr`` with the dashboard's variables replaced."""
        out = self.expr.replace("$__rate_interval", rate_interval)
        out = out.replace("$namespace", namespace).replace("$job", job)
        leftover = re.findall(r"\$\{?\w+", out)
        assert not leftover, f"panel {self.panel!r} uses variables the test does not know: {leftover}"
        return out


def dashboard() -> Json:
    """build/grafana-dashboard.json."""
    loaded: Json = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_queries(board: Json | None = None) -> list[PanelQuery]:
    """Every PromQL target of every panel (rows included, nested panels too)."""
    out: list[PanelQuery] = []

    def walk(panels: list[Json]) -> None:
        for panel in panels:
            for target in panel.get("targets") or []:
                if target.get("expr"):
                    out.append(PanelQuery(panel["title"], target.get("refId", "?"), target["expr"], panel["type"]))
            walk(panel.get("panels") or [])

    walk((board or dashboard())["panels"])
    return out


def variable_queries(board: Json | None = None) -> dict[str, str]:
    """The templating variables' ``label_values(...)`` queries, by variable name."""
    out = {}
    for var in (board or dashboard())["templating"]["list"]:
        if var.get("type") == "query":
            query = var["query"]
            out[var["name"]] = query["query"] if isinstance(query, dict) else query
    return out


_COMPARISON = re.compile(r"^(?P<signal>.+?)\s*(?:>=|<=|==|!=|>|<)\s*[-+]?[0-9.]+(?:e[-+]?[0-9]+)?\s*$", re.DOTALL)
_ABSENT = re.compile(r"^absent\((?P<signal>.+)\)\s*$", re.DOTALL)


def alert_signal(expr: str) -> str:
    """The part of an alert expression a healthy deployment still answers: ``X`` of ``X > 900`` or ``absent(X)``.

    Evaluated against a healthy deployment it must return series; an empty
    result means a metric or label the alert names is never exported, and
    the alert could never fire.
    """
    for pattern in (_ABSENT, _COMPARISON):
        match = pattern.match(expr.strip())
        if match:
            return match.group("signal")
    raise AssertionError(f"cannot find the signal of alert expression {expr!r}; teach alert_signal this form")
