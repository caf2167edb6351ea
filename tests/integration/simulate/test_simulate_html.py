"""`carve simulate --html`: the page opens in a real headless Chromium (Debian's `chromium`; `make test`
installs it through hack/test_deps.sh) without console errors, and each chart's area in a screenshot
holds a drawing, not a blank box. The page is self-contained: no external script, style, font or image."""

from __future__ import annotations

import html
import io
import json
import re
import shutil
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from support.png import read_png

from driver.cli import main
from driver.simulate.report_html import (
    CHART_H,
    CHART_W,
    MARGIN,
    PLOT,
    _nice_max,
    chart_boxes,
    line_chart,
    wait_cap,
    wait_distribution,
)

REPO = Path(__file__).resolve().parents[3]
WINDOW = (MARGIN + 2 * (CHART_W + MARGIN), 1400)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("chromium is missing: `make test-deps` (hack/test_deps.sh) installs Debian's chromium")
    return found


def open_page(page: Path, tmp_path: Path, height: int = WINDOW[1]) -> tuple[Path, list[str]]:
    """Screenshot of the page, and the console lines Chromium logged while loading it."""
    shot = tmp_path / f"{page.stem}.png"
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--force-device-scale-factor=1", f"--window-size={WINDOW[0]},{height}",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.exists(), done.stderr[-2000:]
    return shot, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


WHOLE = {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.carve.dev"}}]}}
SHARE = {"devices": {"requests": [{"name": "g", "exactly": {
    "deviceClassName": "vgpu.carve.dev", "capacity": {"requests": {"memory": "8Gi", "cores": "30"}}}}]}}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    # Whole-GPU pods, then shares, then whole GPUs again: under auto the planner switches GPUs back and
    # forth (every chart has data, auto's changes included); exclusive makes the shares queue.
    base = tmp_path_factory.mktemp("report")
    (base / "cluster.yaml").write_text("nodes:\n- name: a100\n  count: 1\n  gpus: 2xA100-80GB\n")
    pods = []
    for wave in range(3):
        start = wave * 3000
        pods += [{"name": f"whole-{wave}-{k}", "arrival": start + k, "duration": 900, "claims": [WHOLE]}
                 for k in range(3)]
        pods += [{"name": f"share-{wave}-{k}", "arrival": start + 1500 + 30 * k, "duration": 600,
                  "claims": [SHARE]} for k in range(8)]
    (base / "trace.yaml").write_text(yaml.safe_dump({"pods": pods}))
    out = base / "report.html"
    code = main(["simulate", "--cluster", str(base / "cluster.yaml"), "--trace", str(base / "trace.yaml"),
                 "--compare", "--html", str(out), "-o", "json"])
    assert code == 0
    return out


def test_the_page_is_self_contained(report) -> None:
    text = report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    assert "@import" not in text and "url(" not in text and "@font-face" not in text
    assert text.count("<svg") == 6  # busy, waiting, waits, GPU-hours, never scheduled, auto's changes


def test_the_console_check_catches_an_error(tmp_path) -> None:
    # The detector below must see a real error, or its silence on the report proves nothing.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>missingFunction();</script></body></html>")
    _, console = open_page(bad, tmp_path, height=200)
    assert any("missingFunction" in line for line in console), console


def test_the_report_opens_without_console_errors_and_its_charts_are_drawn(report, tmp_path) -> None:
    shot, console = open_page(report, tmp_path)
    assert console == []
    pixels = read_png(shot)
    boxes = chart_boxes(6)
    for i, box in enumerate(boxes):
        assert box.top + CHART_H <= len(pixels), "the window is too short for the charts"
        # The plot area of the chart (inside the axes), where the data is drawn.
        region = [pixels[y][x] for y in range(box.top + 40, box.top + CHART_H - 50, 2)
                  for x in range(box.left + 60, box.left + CHART_W - 30, 2)]
        # Drawn: a colour (series) or dark ink, not the white background or the light grey grid.
        colored = sum(1 for r, g, b in region if max(r, g, b) - min(r, g, b) > 30 or max(r, g, b) < 200)
        assert colored / len(region) > 0.003, f"chart {i} at {box} looks blank ({colored} drawn pixels)"
    # Outside the charts, below the last one: the page's plain background.
    below = boxes[-1].top + CHART_H + MARGIN // 2
    strip = pixels[min(below, len(pixels) - 1)][MARGIN : MARGIN + CHART_W]
    assert len(set(strip)) == 1


@pytest.fixture(scope="module")
def sized(tmp_path_factory) -> tuple[Path, dict]:
    """`--size` on the same trace: one more chart (GPUs needed per strategy) and the answer's sentence."""
    base = tmp_path_factory.mktemp("sized")
    (base / "cluster.yaml").write_text("nodes:\n- name: a100\n  count: 1\n  gpus: 2xA100-80GB\n")
    pods = [{"name": f"whole-{k}", "arrival": 60 * k, "duration": 900, "claims": [WHOLE]} for k in range(6)]
    pods += [{"name": f"share-{k}", "arrival": 30 * k, "duration": 600, "claims": [SHARE]} for k in range(8)]
    (base / "trace.yaml").write_text(yaml.safe_dump({"pods": pods}))
    out = base / "sized.html"
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["simulate", "--cluster", str(base / "cluster.yaml"), "--trace", str(base / "trace.yaml"),
                     "--size", "--p99-wait", "120", "--html", str(out), "-o", "json"])
    assert code == 0
    return out, json.loads(buf.getvalue())


def test_the_sizing_answer_is_in_the_page_and_charted(sized, tmp_path) -> None:
    page, data = sized
    text = page.read_text()
    answer = data["sizing"]["answer"]
    assert answer.startswith("this trace needs ") and "p99 delay <= 120 s" in answer
    assert html.escape(answer) in text
    assert text.count("<svg") == 7  # the six of --compare and GPUs needed per strategy
    assert "GPUs needed at p99 delay &lt;= 120 s" in text
    # auto needs no more than the best single strategy its policy allows
    needed = {k: v["gpus"] for k, v in data["sizing"]["strategies"].items()}
    allowed = [needed[s] for s in ("exclusive", "soft", "mig") if needed[s] is not None]
    assert needed["auto"] is not None and needed["auto"] <= min(allowed)
    shot, console = open_page(page, tmp_path, height=1700)
    assert console == []
    pixels = read_png(shot)
    for i, box in enumerate(chart_boxes(7)):
        assert box.top + CHART_H <= len(pixels), "the window is too short for the charts"
        region = [pixels[y][x] for y in range(box.top + 40, box.top + CHART_H - 50, 2)
                  for x in range(box.left + 60, box.left + CHART_W - 30, 2)]
        colored = sum(1 for r, g, b in region if max(r, g, b) - min(r, g, b) > 30 or max(r, g, b) < 200)
        assert colored / len(region) > 0.003, f"chart {i} at {box} looks blank ({colored} drawn pixels)"


def test_the_wait_chart_spans_every_wait() -> None:
    # The slowest pods are the ones the chart is for: every curve ends at 100% inside the chart.
    waits = [[0.0, 10.0, 20.0, 30.0] + [40.0] * 90, [5.0, 3600.0]]
    top = wait_cap(waits)
    assert top == 3600.0
    for w in waits:
        assert wait_distribution(w, top)[-1] == (60.0, 100.0)


def test_the_legend_of_every_strategy_and_auto_fits_above_the_plot() -> None:
    names = ["exclusive", "mig", "soft", "mps", "slots", "timeslice", "auto"]
    svg = line_chart("t", {n: [(0.0, 1.0), (1.0, 100.0)] for n in names}, "x", "y")
    rects = re.findall(r'<g class="legend"[^>]*><rect x="(\d+)" y="(\d+)"', svg)
    assert len(rects) == len(names)
    _, top, right, _ = PLOT
    assert all(int(x) + 70 <= CHART_W - right + 20 and int(y) + 10 <= top for x, y in rects)
    assert _nice_max(16) == 20 and _nice_max(87) == 100 and _nice_max(0.3) == 0.5
