"""`auto` against every single strategy on the issue's seeded inference-heavy mixes, printed as a table.

The mixes (issue 27): `inference-mix`, seeds 1-3, on 8xA100-80GB nodes under the scheduler's spreading.
Full size (CARVE_BENCH_FULL=1): 1,500 pods every 60 s on 30 nodes, about a minute per seed on a 2-core
machine; by default a fifth (300 pods every 300 s on 6 nodes, the same load per node). Per seed: each
strategy's peak GPUs busy and mean delay (wait + time-slicing slowdown), auto's choice, and whether auto
is at or below the best single strategy its policy allows on each figure. Printed, not asserted: the
assertions are tests/unit/simulate/test_simulate_auto.py's, on small mixes.
"""

from __future__ import annotations

import os
import time

from driver.simulate.command import COMPARED, simulate
from driver.simulate.generator import generate
from driver.simulate.inputs import GenerateModel, NodeGroup

ALLOWED = ("exclusive", "soft", "mig")  # the default policy's


def test_simulate_auto_table() -> None:
    full = os.environ.get("CARVE_BENCH_FULL", "") not in ("", "0")
    pods_n, nodes, gap = (1500, 30, 60.0) if full else (300, 6, 300.0)
    groups = [NodeGroup("a100", nodes, ("A100-80GB",) * 8, None)]
    print()
    print(f"auto vs single strategies: inference-mix, {pods_n} pods every {gap:g} s, "
          f"{nodes} x 8xA100-80GB, kube")
    print(f"{'seed':>4}  " + "  ".join(f"{s:>16}" for s in COMPARED) + "  auto's choice")
    for seed in (1, 2, 3):
        started = time.perf_counter()
        pods = generate(GenerateModel(kind="inference-mix", pods=pods_n, seed=seed, interarrival_s=gap))
        results = {}
        for s in COMPARED:
            results[s] = simulate(groups, pods, s, known=dict(results))
        cells = "  ".join(
            f"{r.peak_gpus_busy:>4} / {r.mean_delay_s:>7.0f} s" + ("*" if r.pods_never_scheduled else " ")
            for r in results.values())
        auto = results["auto"]
        singles = [results[s] for s in ALLOWED]
        peak_ok = auto.peak_gpus_busy <= min(r.peak_gpus_busy for r in singles)
        delay_ok = auto.mean_delay_s <= min(r.mean_delay_s for r in singles) + 1e-9
        print(f"{seed:>4}  {cells}  {auto.auto_choice}  (GPUs {'<=' if peak_ok else '>'} best single, "
              f"delay {'<=' if delay_ok else '>'} best single; {time.perf_counter() - started:.0f} s)")
    print("cells: peak GPUs busy / mean delay (wait + slowdown); * some pods never scheduled")
