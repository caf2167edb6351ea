"""The chart's Grafana dashboard as a list of PromQL queries, with Grafana's template variables replaced so
Prometheus itself can run them: the unit tests parse every one with `promtool check rules`
(tests/unit/helm/test_helm_monitoring.py), the e2e runs every one against a real Prometheus that scrapes
the plugins and the controller (e2e/test_monitoring.py).

How variables become PromQL (docs/metrics.md, "How the dashboard is checked"):
- Grafana's own interval variables (`$__rate_interval`, `$__interval`, `$__range`, ...) become the fixed
  durations of `BUILTINS`: a rate window at least four scrape intervals of the e2e's Prometheus (1 s)
  wide, as Grafana's `$__rate_interval` is.
- A dashboard variable of type `query` or `custom` becomes its "All" value (`allValue`, else `.+`), as when
  a user picks All: it must be used with a regex matcher (`=~"$node"`), which multi-value variables need
  anyway; `interval`, `constant` and `textbox` variables become their current (else first) value.
- `datasource` variables only pick the data source, never appear in an expression, and are left alone.
A variable the dashboard does not define, or a `$` left after the substitution, is an error naming the
panel: the checks never run a query that Grafana would not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "helm" / "carve" / "monitoring" / "carve-dashboard.json"
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
# $var, ${var}, ${var:format}, [[var]] (Grafana's forms)
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


class DashboardError(ValueError):
    """A dashboard query the checks cannot run as Grafana would; the message names the panel."""


@dataclass(frozen=True)
class PanelQuery:
    panel: str  # the panel's title
    ref_id: str  # the target's refId (A, B, ...)
    expr: str  # as written in the dashboard
    promql: str  # with the template variables replaced

    @property
    def where(self) -> str:
        return f"panel {self.panel!r} query {self.ref_id}"


def _variable_values(dashboard: dict[str, Any]) -> dict[str, str]:
    values = dict(BUILTINS)
    for v in (dashboard.get("templating") or {}).get("list") or []:
        kind, name = v.get("type"), v["name"]
        if kind in ("query", "custom"):
            values[name] = v.get("allValue") or ".+"
        elif kind in ("interval", "constant", "textbox"):
            current = (v.get("current") or {}).get("value")
            options = [o.get("value") for o in v.get("options") or []]
            values[name] = str(current or (options[0] if options else v.get("query", "")).split(",")[0])
    return values


def substitute(expr: str, values: dict[str, str], where: str) -> str:
    def one(m: re.Match) -> str:
        name = next(g for g in m.groups() if g)
        if name not in values:
            raise DashboardError(f"{where}: {expr!r} uses ${name}, which the dashboard does not define")
        return values[name]

    out = _VARIABLE.sub(one, expr)
    if "$" in out:
        raise DashboardError(f"{where}: {expr!r} still has a '$' after substituting its variables: {out!r}")
    return out


def panel_queries(path: Path = DASHBOARD) -> list[PanelQuery]:
    """Every target of every panel (rows' nested panels too), in the dashboard's order."""
    dashboard = json.loads(path.read_text())
    values = _variable_values(dashboard)
    panels = []
    for p in dashboard.get("panels") or []:
        panels.append(p)
        panels.extend(p.get("panels") or [])  # a collapsed row holds its panels
    queries = []
    for p in panels:
        for t in p.get("targets") or []:
            if t.get("hide"):
                continue
            title, ref_id = p.get("title", str(p.get("id"))), t.get("refId", "?")
            where = f"panel {title!r} query {ref_id}"
            if not t.get("expr"):
                raise DashboardError(f"{where}: no PromQL expression (expr)")
            promql = substitute(t["expr"], values, where)
            queries.append(PanelQuery(title, ref_id, t["expr"], promql))
    return queries
