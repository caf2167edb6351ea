"""`carve simulate --html report.html`: one self-contained page to look at, no external scripts or fonts.

Charts are inline SVG drawn here (system fonts only), laid out at fixed positions (`chart_boxes`) so the
page looks the same everywhere and a test can find each chart's pixels in a screenshot. A few lines of
inline JavaScript highlight a strategy's series when its legend entry is hovered. Charts: GPUs busy over
time and pods waiting over time per strategy, the wait-time distribution (share of pods that waited at
most t), GPU-hours and never-scheduled pods per strategy, and auto's strategy changes over time.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from driver.simulate.engine import SimResult
from driver.simulate.sizing import Sizing

CHART_W, CHART_H = 560, 320
MARGIN = 24  # around and between charts
TOP = 230  # the heading, the summary, auto's choice and the sizing answer above the charts
# Left, top, right, bottom padding inside a chart, for axes and labels; the legend sits in the top
# padding, above the plot, so a curve at its maximum (100% waited) is not drawn under it.
PLOT = (56, 44, 24, 44)
LEGEND_STEP = 66  # px per legend entry: seven series (every strategy and auto) fit one row
COLORS = {
    "exclusive": "#4e79a7",
    "mig": "#f28e2b",
    "soft": "#59a14f",
    "mps": "#9c755f",
    "slots": "#b07aa1",
    "timeslice": "#e15759",
    "auto": "#111111",
}
FALLBACK_COLORS = ("#76b7b2", "#edc948", "#ff9da7", "#bab0ac")


@dataclass(frozen=True)
class Box:
    left: int
    top: int
    width: int
    height: int


def chart_boxes(count: int) -> list[Box]:
    """Where chart i is drawn on the page (CSS pixels): two per row."""
    return [
        Box(MARGIN + (i % 2) * (CHART_W + MARGIN), TOP + (i // 2) * (CHART_H + MARGIN), CHART_W, CHART_H)
        for i in range(count)
    ]


def _color(name: str, index: int) -> str:
    return COLORS.get(name, FALLBACK_COLORS[index % len(FALLBACK_COLORS)])


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    # Smallest of 1, 2, 2.5, 5 x a power of ten at or above the value (16 -> 20, not 100).
    scale = 10 ** len(str(int(value)))
    for magnitude in (scale / 100, scale / 10, scale):
        for step in (1, 2, 2.5, 5):
            top = step * magnitude
            if top >= value:
                return top
    return value


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.3g}"


def _frame(title: str, body: str, x_label: str, y_label: str, x_max: float | None, y_max: float) -> str:
    """Background, title, axes, grid and tick labels (none on x when x_max is None) around `body`."""
    left, top, right, bottom = PLOT
    w, h = CHART_W - left - right, CHART_H - top - bottom
    ticks = []
    for k in range(5):
        y = top + h - h * k / 4
        ticks.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + w}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(y_max * k / 4)}</text>'
        )
        if x_max is not None:
            x = left + w * k / 4
            ticks.append(
                f'<text x="{x:.1f}" y="{top + h + 16}" text-anchor="middle">{_fmt(x_max * k / 4)}</text>'
            )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{CHART_H}" '
        f'viewBox="0 0 {CHART_W} {CHART_H}" role="img" aria-label="{html.escape(title)}">'
        f'<rect width="{CHART_W}" height="{CHART_H}" class="bg"/>'
        f'<text x="{left}" y="18" class="title">{html.escape(title)}</text>'
        + "".join(ticks)
        + f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" class="axis"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" class="axis"/>'
        f'<text x="{left + w / 2:.1f}" y="{CHART_H - 8}" text-anchor="middle">{html.escape(x_label)}</text>'
        f'<text x="14" y="{top + h / 2:.1f}" transform="rotate(-90 14 {top + h / 2:.1f})" '
        f'text-anchor="middle">{html.escape(y_label)}</text>' + body + "</svg>"
    )


def line_chart(
    title: str, series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str, step: bool = True
) -> str:
    """One polyline per series; `step`: values hold until the next sample (counts over time)."""
    left, top, right, bottom = PLOT
    w, h = CHART_W - left - right, CHART_H - top - bottom
    x_max = max((x for pts in series.values() for x, _ in pts), default=1.0) or 1.0
    y_max = _nice_max(max((y for pts in series.values() for _, y in pts), default=1.0))
    lines = []
    for i, (name, pts) in enumerate(series.items()):
        coords: list[str] = []
        prev_y = None
        for x, y in pts:
            px, py = left + w * x / x_max, top + h - h * y / y_max
            if step and prev_y is not None:
                coords.append(f"{px:.1f},{prev_y:.1f}")
            coords.append(f"{px:.1f},{py:.1f}")
            prev_y = py
        lines.append(
            f'<polyline data-series="{html.escape(name)}" points="{" ".join(coords)}" fill="none" '
            f'stroke="{_color(name, i)}" stroke-width="2.5"/>'
        )
    per_row = max(1, (w - 8) // LEGEND_STEP)
    legend = "".join(
        f'<g class="legend" data-series="{html.escape(name)}">'
        f'<rect x="{left + 8 + LEGEND_STEP * (i % per_row)}" y="{24 + 12 * (i // per_row)}" '
        f'width="10" height="10" fill="{_color(name, i)}"/>'
        f'<text x="{left + 22 + LEGEND_STEP * (i % per_row)}" y="{33 + 12 * (i // per_row)}">'
        f"{html.escape(name)}</text></g>"
        for i, name in enumerate(series)
    )
    return _frame(title, "".join(lines) + legend, x_label, y_label, x_max, y_max)


def bar_chart(title: str, values: dict[str, float], y_label: str) -> str:
    """One bar per strategy, its value above it."""
    left, top, right, bottom = PLOT
    w, h = CHART_W - left - right, CHART_H - top - bottom
    y_max = _nice_max(max(values.values(), default=1.0))
    slot = w / max(1, len(values))
    bars = []
    for i, (name, v) in enumerate(values.items()):
        bh = h * v / y_max
        x = left + slot * i + slot * 0.15
        bars.append(
            f'<rect data-series="{html.escape(name)}" x="{x:.1f}" y="{top + h - bh:.1f}" '
            f'width="{slot * 0.7:.1f}" height="{bh:.1f}" fill="{_color(name, i)}"/>'
            f'<text x="{x + slot * 0.35:.1f}" y="{top + h - bh - 4:.1f}" text-anchor="middle">'
            f"{_fmt(v)}</text>"
            f'<text x="{x + slot * 0.35:.1f}" y="{top + h + 16}" text-anchor="middle">'
            f"{html.escape(name)}</text>"
        )
    return _frame(title, "".join(bars), "strategy", y_label, None, y_max)


def _hours(points: Sequence[tuple[float, int, int, int]], field: int) -> list[tuple[float, float]]:
    return [(p[0] / 3600.0, float(p[field])) for p in points]


def wait_cap(all_waits: list[list[float]]) -> float:
    """The x range of the distribution chart: the longest wait of any run, so every curve reaches 100%
    inside the chart (a percentile cap cut the slowest pods off, the ones the chart is for)."""
    return max((w for waits in all_waits for w in waits), default=0.0) or 60.0


def wait_distribution(waits: list[float], top: float, buckets: int = 120) -> list[tuple[float, float]]:
    """(wait in minutes, % of the pods that waited at all that waited at most that long), 0..`top` s."""
    ordered = sorted(w for w in waits if w > 0)
    if not ordered:
        return [(0.0, 100.0), (top / 60.0, 100.0)]
    out = []
    j = 0
    for k in range(buckets + 1):
        limit = top * k / buckets
        while j < len(ordered) and ordered[j] <= limit:
            j += 1
        out.append((limit / 60.0, 100.0 * j / len(ordered)))
    return out


_SCRIPT = """
document.querySelectorAll('.legend').forEach(function (entry) {
  var name = entry.getAttribute('data-series');
  entry.addEventListener('mouseenter', function () {
    document.querySelectorAll('[data-series]').forEach(function (el) {
      if (!el.classList.contains('legend')) {
        el.style.opacity = el.getAttribute('data-series') === name ? '1' : '0.15';
      }
    });
  });
  entry.addEventListener('mouseleave', function () {
    document.querySelectorAll('[data-series]').forEach(function (el) { el.style.opacity = ''; });
  });
});
"""

_STYLE = """
body { margin: 0; font: 13px system-ui, sans-serif; color: #222; background: #fafafa; }
header { position: absolute; left: %dpx; top: 12px; right: %dpx; }
h1 { font-size: 20px; margin: 0 0 6px; }
p { margin: 2px 0; }
.chart { position: absolute; box-shadow: 0 1px 3px rgba(0,0,0,.2); }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg .title { font-size: 14px; font-weight: 600; }
svg .bg { fill: #fff; }
svg .grid { stroke: #e4e4e4; }
svg .axis { stroke: #888; }
.legend { cursor: default; }
"""


def render(results: list[SimResult], cluster_label: str, trace_label: str,
           sizing: Sizing | None = None) -> str:
    """The whole page for one or several runs (one per strategy), and the sizing answer when asked."""
    by_name = {r.strategy: r for r in results}
    busy = {r.strategy: _hours(r.timeline.points if r.timeline else [], 1) for r in results}
    queue = {r.strategy: _hours(r.timeline.points if r.timeline else [], 2) for r in results}
    cap = wait_cap([r.waits for r in results])
    waits = {r.strategy: wait_distribution(r.waits, cap) for r in results}
    charts = [
        line_chart("GPUs busy over time", busy, "hours", "GPUs busy"),
        line_chart("Pods waiting over time", queue, "hours", "pods waiting"),
        line_chart(
            "Wait-time distribution (pods that waited)",
            waits,
            "wait (minutes)",
            "% waited at most",
            step=False,
        ),
        bar_chart("GPU-hours busy", {r.strategy: round(r.gpu_hours_busy, 2) for r in results}, "GPU-hours"),
        bar_chart("Pods never scheduled", {r.strategy: r.pods_never_scheduled for r in results}, "pods"),
    ]
    if sizing is not None:
        needed = {s.name: float(s.gpus) for s in (*sizing.strategies, sizing.auto) if s.gpus is not None}
        charts.append(bar_chart(f"GPUs needed at p99 delay <= {sizing.target_p99_s:g} s", needed, "GPUs"))
    auto = by_name.get("auto")
    if auto is not None and auto.timeline is not None:
        changes = {"auto": _hours(auto.timeline.points, 3)}
        charts.append(
            line_chart(
                "auto: strategy changes over time", changes, "hours", "GPU strategy changes (cumulative)"
            )
        )
    boxes = chart_boxes(len(charts))
    height = boxes[-1].top + CHART_H + MARGIN
    summary = ", ".join(
        f"{html.escape(r.strategy)}: {r.pods_scheduled}/{r.pods_total} scheduled, peak {r.peak_gpus_busy} of "
        f"{r.gpus_total} GPUs"
        for r in results
    )
    sections = "".join(
        f'<div class="chart" id="chart-{i}" style="left:{b.left}px;top:{b.top}px;width:{b.width}px;'
        f'height:{b.height}px">{svg}</div>'
        for i, (svg, b) in enumerate(zip(charts, boxes, strict=True))
    )
    width = MARGIN + 2 * (CHART_W + MARGIN)
    extra = ""
    if auto is not None and auto.auto_why:
        extra += f'<p id="auto-choice">auto chose {html.escape(auto.auto_why)}</p>'
    if sizing is not None:
        extra += f'<p id="sizing">{html.escape(sizing.sentence())}</p>'
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>carve simulate: {html.escape(trace_label)} on {html.escape(cluster_label)}</title>"
        f"<style>{_STYLE % (MARGIN, MARGIN)}</style></head>"
        f'<body style="min-width:{width}px;min-height:{height}px">'
        f"<header><h1>carve simulate: {html.escape(trace_label)} on {html.escape(cluster_label)}</h1>"
        f"<p>{summary}</p>{extra}<p>Hover a legend entry to pick out a strategy.</p></header>"
        f"{sections}<script>{_SCRIPT}</script></body></html>\n"
    )
