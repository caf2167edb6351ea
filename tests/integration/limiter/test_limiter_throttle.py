"""Compute quota: a saturating launch loop on a fake GPU holds its share, on every launch path, on a small
and a large GPU, under each core policy, and follows a live change of the share.

All scenarios run concurrently in one module fixture (each on its own fake GPU state), so the suite pays the
5 s measurement window once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from limiter_harness import Claim, require_native

TOLERANCE = 5
KERNEL_NS = 1_000_000  # 1 ms per wave: few enough kernels that the fake GPU's ring covers the whole window


def _claim(root: Path, name: str, gpus: str, state: str, **limits: object) -> Claim:
    d = root / name
    d.mkdir()
    c = Claim(tmp=d, gpus=gpus, state=root / f"{state}.state")
    if limits:
        c.create(**limits)
    return c


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    require_native()
    root = tmp_path_factory.mktemp("throttle")
    t4, h100 = "1xT4", "1xH100-80GB"
    force = dict(cores=30, core_policy="force")
    # name: (claim, seconds, grid, launch path); claims that share a `state` share one fake GPU
    plan = {
        "force_t4": (_claim(root, "force_t4", t4, "a", **force), 5, 80, "kernel"),
        "force_h100": (_claim(root, "force_h100", h100, "b", **force), 5, 264, "kernel"),
        "graph": (_claim(root, "graph", t4, "c", **force), 5, 80, "graph"),
        "coop": (_claim(root, "coop", t4, "d", **force), 5, 80, "coop"),
        "ex": (_claim(root, "ex", h100, "e", **force), 5, 264, "ex"),
        "default_alone": (_claim(root, "default_alone", t4, "f", cores=30), 3, 80, "kernel"),
        "default_neighbour": (_claim(root, "default_nb", t4, "g", cores=30), 5, 80, "kernel"),
        "neighbour_of_default": (_claim(root, "nb_g", t4, "g", memory=0), 5, 80, "kernel"),
        "force_neighbour": (_claim(root, "force_nb", t4, "h", **force), 5, 80, "kernel"),
        "neighbour_of_force": (_claim(root, "nb_h", t4, "h", memory=0), 5, 80, "kernel"),
        "live": (_claim(root, "live", t4, "i", **force), 4, 80, "kernel"),
        "low": (_claim(root, "low", t4, "j", cores=50, priority="low"), 5, 80, "kernel"),
        "high_of_low": (_claim(root, "high", t4, "j", memory=0), 5, 80, "kernel"),
    }
    plan["low"][0].rewrite_limits(high_neighbours=(1,))  # the plugin: a high-priority claim shares this GPU
    procs = {}
    start = time.monotonic()
    for name, (c, secs, grid, how) in plan.items():
        path = [how] if how != "kernel" else []
        procs[name] = c.popen("launch", str(secs), str(grid), str(KERNEL_NS), *path)
    time.sleep(max(0.0, 2.0 - (time.monotonic() - start)))
    plan["live"][0].rewrite_limits(shares=(60,))  # the plugin changes a running claim's share
    out = {}
    for name, p in procs.items():
        stdout, _ = p.communicate(timeout=60)
        assert p.returncode == 0, f"{name}: client failed"
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


def near(value: float, target: float) -> bool:
    return abs(value - target) <= TOLERANCE


@pytest.mark.parametrize("name", ["force_t4", "force_h100"])
def test_share_of_30_percent_holds_over_5_seconds_on_small_and_large_gpus(runs, name):
    assert near(runs[name]["overall"], 30), runs[name]


@pytest.mark.parametrize("name", ["graph", "coop", "ex"])
def test_graphs_cooperative_and_ex_launches_are_throttled_too(runs, name):
    assert near(runs[name]["overall"], 30), runs[name]


def test_default_policy_bursts_while_the_gpu_is_otherwise_idle(runs):
    assert runs["default_alone"]["overall"] >= 90, runs["default_alone"]


def test_default_policy_holds_the_share_when_a_neighbour_is_busy(runs):
    assert near(runs["default_neighbour"]["overall"], 30), runs["default_neighbour"]
    assert runs["neighbour_of_default"]["overall"] >= 60, runs["neighbour_of_default"]


def test_force_policy_holds_the_share_with_or_without_a_neighbour(runs):
    assert near(runs["force_neighbour"]["overall"], 30), runs["force_neighbour"]
    assert near(runs["force_t4"]["overall"], 30), runs["force_t4"]


def test_live_change_from_30_to_60_percent_takes_effect_within_a_second(runs):
    windows = runs["live"]["windows"]  # 250 ms each; the share changes 2.0 s after the first client started
    # This client may have started a little after the first one, so in its own timeline the change can come
    # before 2.0 s: the "before" windows stop at 1.5 s to leave that start-up skew out.
    before = windows[2:6]  # 0.5 - 1.5 s
    after = windows[12:]  # from 3.0 s: at most one second after the change
    assert all(near(w, 30) for w in before), windows
    assert after and all(near(w, 60) for w in after), windows


def test_low_priority_yields_to_a_busy_high_priority_neighbour(runs):
    assert runs["low"]["overall"] <= 10 + TOLERANCE, runs["low"]
    assert runs["high_of_low"]["overall"] >= 75, runs["high_of_low"]
