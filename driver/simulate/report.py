"""Printing simulation results: a key/value table, one column per strategy with --compare, or JSON."""

from __future__ import annotations

import json
from typing import Any

from driver.simulate.sizing import Sizing

# Row labels of the table, with the unit a reader needs; the JSON keys are the dict keys.
LABELS = {
    "strategy": "strategy",
    "node_policy": "node policy",
    "gpus_total": "GPUs in cluster",
    "peak_gpus_busy": "peak GPUs busy",
    "gpu_hours_busy": "GPU-hours busy",
    "pods_total": "pods in trace",
    "pods_scheduled": "pods scheduled",
    "pods_never_scheduled": "pods never scheduled",
    "mean_wait_s": "mean wait (s)",
    "max_wait_s": "max wait (s)",
    "p99_wait_s": "p99 wait (s)",
    "mean_stretch": "run time / duration (mean)",
    "mean_delay_s": "mean delay: wait + slowdown (s)",
    "p99_delay_s": "p99 delay (s)",
    "lower_bound_gpus": "lower bound (GPUs)",
    "packing_ratio": "packing ratio (peak/bound)",
    "gpus_by_strategy": "GPUs by strategy",
    "strategy_changes": "strategy changes (auto)",
    "planner_runs": "planner runs (auto)",
    "auto_choice": "auto's choice",
}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:.0f}"
    return str(value)


def table(reports: list[dict[str, Any]]) -> str:
    """Rows are metrics, columns are runs; numbers right-aligned."""
    keys = [k for k in LABELS if any(k in r for r in reports)]
    width0 = max(len(LABELS[k]) for k in keys)
    cells = [[_cell(r.get(k)) for k in keys] for r in reports]
    widths = [max(len(c) for c in col) for col in cells]
    lines = []
    for row, key in enumerate(keys):
        parts = [LABELS[key].ljust(width0)]
        for col, w in zip(cells, widths, strict=True):
            parts.append(col[row].rjust(w))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def as_json(reports: list[dict[str, Any]], compare: bool) -> str:
    """One object for a single run; with --compare an object keyed by strategy."""
    if compare:
        return json.dumps({r["strategy"]: r for r in reports}, indent=2)
    return json.dumps(reports[0], indent=2)


def sizing_table(sizing: Sizing) -> str:
    """`--size`: GPUs needed per strategy and under auto, then the answer in one sentence."""
    head = f"sizing: smallest cluster of this shape with p99 delay <= {sizing.target_p99_s:g} s"
    rows = [("strategy", "GPUs needed", "nodes", "p99 delay (s)", "mean wait (s)", "layout chosen")]
    for s in (*sizing.strategies, sizing.auto):
        r = s.result
        if r is None:
            rows.append((s.name, "-", "-", "-", "-", "not met"))
            continue
        rows.append((s.name, _cell(s.gpus), s.layout(), _cell(round(r.p99_delay_s, 1)),
                     _cell(round(r.mean_wait_s, 1)), s.choice))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = [head] + ["  ".join(c.ljust(w) if k in (0, 2, 5) else c.rjust(w)
                                for k, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
                      for row in rows]
    return "\n".join([*lines, sizing.sentence()])
