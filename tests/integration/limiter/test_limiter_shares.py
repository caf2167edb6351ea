"""Compute shares between neighbours on one fake GPU: reserved cores are guaranteed next to a best-effort
claim, `corePolicy: disable` never throttles, the busy-neighbour threshold, and a low-priority claim with
and without a busy high-priority neighbour.

Every scenario is two (or one) saturating launch loops on their own fake GPU; all run concurrently in one
module fixture, so the suite pays the measurement window once. A scenario whose clients waited for a CPU
is measured again (cpu_starvation.py says why the occupancy is not valid then). The limits files are
written as the plugin writes them (driver/plugin/enforcement/regions.py decides the effective shares and
the neighbour marks).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cpu_starvation import RunQueueWatch, measure
from limiter_harness import Claim, require_native

from driver.plugin.enforcement.regions import ClaimRegion, effective_shares

SECONDS = 4
GRID = 80
KERNEL_NS = 1_000_000


# name: (the fake GPU it shares, its limits); scenarios on one fake GPU form a group, measured together
SCENARIOS: dict[str, tuple[str, dict[str, object]]] = {
    # a 60% reservation next to a best-effort claim (cores: 0) that saturates the GPU
    "reserved": ("a", dict(cores=60)),
    "best_effort": ("a", dict(cores=0)),
    # corePolicy: disable with a busy neighbour: never throttled, whatever the share says
    "disable": ("b", dict(cores=30, core_policy="disable")),
    "neighbour_of_disable": ("b", {}),
    # the busy-neighbour threshold (5% of SM time): a neighbour held at 3% is idle, one at 12% is busy
    "beside_quiet": ("c", dict(cores=30)),
    "quiet": ("c", dict(cores=3, core_policy="force")),
    "beside_busy": ("d", dict(cores=30)),
    "busy": ("d", dict(cores=12, core_policy="force")),
    # low priority, marked as sharing its GPU with a high-priority claim that is idle: it bursts
    "low_alone": ("e", dict(cores=50, priority="low")),
    # low priority next to a busy neighbour that is not high priority (no mark): it keeps its share
    "low_unmarked": ("f", dict(cores=50, priority="low")),
    "low_neighbour": ("f", dict(priority="low")),
    # the plugin writes a best-effort claim's share while it runs (a reservation arrived on its GPU)
    "late_reserved": ("g", dict(cores=60)),
    "late_best_effort": ("g", dict(cores=0)),
}
GPU = "GPU-shared-by-reserved-and-best-effort"


def _claim(root: Path, name: str, state: str, **limits: object) -> Claim:
    d = root / name
    d.mkdir(parents=True)
    c = Claim(tmp=d, gpus="1xT4", state=root / f"{state}.state")
    return c.create(**limits)


def _shares() -> dict[tuple[str, int], int]:
    return effective_shares(
        [ClaimRegion("reserved", "high", (GPU,), (60,)), ClaimRegion("best_effort", "high", (GPU,), (0,))]
    )


def _run(names: list[str], root: Path) -> tuple[dict[str, dict], RunQueueWatch]:
    plan = {n: _claim(root, n, SCENARIOS[n][0], **SCENARIOS[n][1]) for n in names}
    if "best_effort" in plan:
        plan["best_effort"].rewrite_limits(shares=(_shares()[("best_effort", 0)],))
    if "low_alone" in plan:
        plan["low_alone"].rewrite_limits(high_neighbours=(1,))
    procs = {name: c.popen("launch", str(SECONDS), str(GRID), str(KERNEL_NS)) for name, c in plan.items()}
    watch = RunQueueWatch(procs)
    start = time.monotonic()
    time.sleep(1.0)
    if "late_best_effort" in plan:
        plan["late_best_effort"].rewrite_limits(shares=(40,))
    out = {}
    for name, p in procs.items():
        stdout, _ = p.communicate(timeout=60)
        assert p.returncode == 0, f"{name}: client failed"
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    watch.join()
    assert time.monotonic() - start < 60
    return out, watch


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    require_native()
    assert _shares() == {("reserved", 0): 60, ("best_effort", 0): 40}
    groups: dict[str, list[str]] = {}
    for name, (state, _) in SCENARIOS.items():
        groups.setdefault(state, []).append(name)
    return measure(groups, _run, tmp_path_factory.mktemp("shares"))


def test_reserved_cores_hold_next_to_a_saturating_best_effort_claim(runs):
    assert runs["reserved"]["overall"] >= 55, runs["reserved"]
    assert runs["best_effort"]["overall"] <= 45, runs["best_effort"]


def test_core_policy_disable_is_never_throttled(runs):
    # two unthrottled loops split the fake GPU about evenly; a 30% throttle would show as <= 35
    assert runs["disable"]["overall"] >= 40, runs["disable"]


def test_a_neighbour_below_the_busy_threshold_does_not_hold_a_default_claim_back(runs):
    assert runs["quiet"]["overall"] <= 4, runs["quiet"]
    # Held back, the default claim would run at its 30 % share (the busy case below: 30 +- 5). Not held
    # back, it bursts into the idle GPU: at least twice its share. (A fixed 80 % was a claim about the
    # machine, not the rule: it read 79 once on a busy 2-core machine with no CPU starvation recorded.)
    assert runs["beside_quiet"]["overall"] >= 2 * 30, runs["beside_quiet"]


def test_a_neighbour_above_the_busy_threshold_holds_a_default_claim_to_its_share(runs):
    assert runs["busy"]["overall"] >= 8, runs["busy"]
    assert abs(runs["beside_busy"]["overall"] - 30) <= 5, runs["beside_busy"]


def test_low_priority_without_a_busy_high_priority_neighbour_keeps_the_idle_gpu(runs):
    assert runs["low_alone"]["overall"] >= 85, runs["low_alone"]


def test_low_priority_next_to_a_busy_low_priority_neighbour_keeps_its_share_not_ten_percent(runs):
    assert abs(runs["low_unmarked"]["overall"] - 50) <= 6, runs["low_unmarked"]


def test_a_share_written_while_the_best_effort_claim_runs_applies_within_a_second(runs):
    windows = runs["late_reserved"]["windows"]  # 250 ms each; the share is written 1.0 s in
    after = windows[9:]  # from 2.25 s
    assert after and sum(after) / len(after) >= 55, windows
    assert sum(runs["late_best_effort"]["windows"][9:]) / len(after) <= 45, runs["late_best_effort"]
