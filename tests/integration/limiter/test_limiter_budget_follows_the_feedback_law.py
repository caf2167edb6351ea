"""Every tick of the feedback thread follows the law docs/limiter.md states (feedback.c: measure, control,
steer), checked tick by tick against a model of it here.

The limiter logs each tick of a limited device at debug level with every input of the law and what it
decided: the blocks launched since the last tick and over what time, whether a launch waited, NVML's
measurement of the claim and of the others, the target, and the gate's mode and budget after the tick. The
doubles are printed exactly (%.17g), so the model below recomputes each budget from the logged inputs and the
claim's limits and must find the logged one, whatever the timing of the run: a loaded machine changes the
inputs, never whether the law holds.

What drives the ticks is the fake NVML's fixed sample list (CARVE_FAKE_UTIL_FILE), which the client script
rewrites between its phases: the claim measured over its target, under it, at nothing; a neighbour below
and at the 5% that makes it busy; a low-priority claim yielding to a high-priority neighbour. The measurement
logged at each tick is also checked against the list the client wrote (the claim's pids averaged over their
samples, the others summed), as is the target the claim's limits and priority give.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from limiter_harness import CUDA_CONTEXT

from driver.limits import Region

TICK = re.compile(
    r"device 0 tick: launched (?P<launched>\d+) in (?P<elapsed>\S+) s, starved (?P<starved>[01]); "
    r"(?P<sample>sample|no sample) claim (?P<claim>\d+) other (?P<other>\d+) neighbour (?P<neighbour>[01]); "
    r"target (?P<target>\d+); (?P<mode>idle|count|throttle) at (?P<rate>\S+) blocks/s"
)
NEIGHBOUR_MIN = 5  # percent of SM time by others that makes a busy neighbour
LOW_SHARE = 10  # what a low-priority claim keeps while a high-priority neighbour is busy
GAIN = 0.8
INIT_PID_NS = 0xEFFFFFFC  # the host's pid namespace: the limiter knows its own host pid there

# The client: phases of launches and pauses, each under its own sample list. `rows` of a phase are
# (pid, smUtil) with pid None for the client itself; the list is replaced whole (os.replace) so the fake NVML
# never reads half of it.
CLIENT = CUDA_CONTEXT + textwrap.dedent(
    """
    import json, os, time
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1000)))
    samples = os.environ["SAMPLES"]
    def rows(rs):
        with open(samples + ".new", "w") as out:
            out.writelines(f"0 {os.getpid() if pid is None else pid} {util}\\n" for pid, util in rs)
        os.replace(samples + ".new", samples)
    for phase in json.loads(os.environ["PHASES"]):
        rows(phase["rows"])
        for _ in range(phase["launches"]):
            assert cuda.cuLaunchKernel(f, phase["blocks"], 1, 1, 32, 1, 1, 0, None, None, None) == 0
            time.sleep(0.002)
        time.sleep(phase["pause"])
    print(os.getpid(), flush=True)
    """
)


def phase(rows: list[tuple[int | None, int]], launches: int = 0, blocks: int = 1, pause: float = 0.0) -> dict:
    return {"rows": rows, "launches": launches, "blocks": blocks, "pause": pause}


@dataclass
class Tick:
    launched: int
    elapsed: float
    starved: bool
    fresh: bool
    claim: int
    other: int
    neighbour: bool
    target: int
    mode: str
    rate: float

    @classmethod
    def parse(cls, m: re.Match) -> Tick:
        return cls(
            launched=int(m["launched"]),
            elapsed=float(m["elapsed"]),
            starved=m["starved"] == "1",
            fresh=m["sample"] == "sample",
            claim=int(m["claim"]),
            other=int(m["other"]),
            neighbour=m["neighbour"] == "1",
            target=int(m["target"]),
            mode=m["mode"],
            rate=float(m["rate"]),
        )


@dataclass(frozen=True)
class Limits:
    cores: int
    policy: str  # default | force
    low: bool = False
    high_neighbours: bool = False


def measured(rows: list[tuple[int | None, int]], own_pid: bool) -> tuple[int, int, bool]:
    """(claim, other, neighbour) the limiter makes of one sample list. Each pid's samples are averaged; the
    claim's pid is the client's own where the limiter knows its host pid, else no pid is known and the whole
    GPU counts as the claim's, with a neighbour when more pids are busy than the claim has processes (1)."""
    per_pid: dict[int | None, list[int]] = {}
    for pid, util in rows:
        per_pid.setdefault(pid, []).append(util)
    averages = {pid: sum(us) // len(us) for pid, us in per_pid.items()}
    total = sum(averages.values())
    if own_pid:
        claim = averages.get(None, 0)
        other = total - claim
        neighbour = other >= NEIGHBOUR_MIN
    else:
        claim, other = total, 0
        neighbour = sum(1 for u in averages.values() if u > 0) > 1
    return min(claim, 100), other, neighbour


def expected_target(limits: Limits, tick: Tick) -> tuple[int, bool, bool]:
    """(target, throttle, counting) for the claim's limits and the tick's measurement."""
    target = 100 if limits.cores == 0 or limits.cores > 100 else limits.cores
    yields = limits.low and limits.high_neighbours and tick.neighbour
    if yields and target > LOW_SHARE:
        target = LOW_SHARE
    throttle = target < 100 and (limits.policy == "force" or tick.neighbour or yields)
    counting = target < 100 or limits.low
    return target, throttle, counting


def expected_rate(mode: str, rate: float, tick: Tick) -> float:
    """The budget after a throttled tick, from the mode and budget before it."""
    launched_rate = tick.launched / tick.elapsed if tick.elapsed > 0 else 0.0
    if mode != "throttle":  # switching on: calibrate on what was launched for what was measured
        if tick.fresh and tick.claim > 0 and launched_rate > 0:
            return launched_rate * tick.target / tick.claim
        if rate <= 0:
            return launched_rate * tick.target / 100.0 if launched_rate > 0 else 1000.0
        return rate
    if not tick.fresh:
        return rate
    nxt = rate
    if tick.claim > 0:
        ratio = tick.target / tick.claim
        if ratio < 1 or tick.starved:
            nxt = min(max(launched_rate * (1 + GAIN * (ratio - 1)), rate / 8), rate * 8)
    elif tick.starved:
        nxt = rate * 2
    return nxt if nxt > 1 else 1.0


@dataclass
class Run:
    ticks: list[Tick]
    held: set[int]  # every target the claim's region showed while the client ran (the plugin reads it)


def run(claim, tmp_path: Path, limits: Limits, phases: list[dict], wrapper: tuple[str, ...] = ()) -> Run:
    c = claim().create(
        cores=limits.cores, core_policy=limits.policy, priority="low" if limits.low else "high"
    )
    if limits.high_neighbours:
        c.rewrite_limits(high_neighbours=(1,))
    env = c.env(
        CARVE_FAKE_UTIL_FILE=str(tmp_path / "samples"),
        SAMPLES=str(tmp_path / "samples"),
        CARVE_TICK_MS="20",
        CARVE_LOG="debug",
        PHASES=json.dumps(phases),
    )
    log = tmp_path / "stderr"
    held: set[int] = set()
    with log.open("w") as stderr:  # a file: a pipe nobody reads while the region is polled could fill
        client = subprocess.Popen([*wrapper, sys.executable, "-c", CLIENT], env=env, stderr=stderr, text=True)
        try:
            while client.poll() is None:
                with Region.open(c.region) as r:
                    held.add(r.target(0))
                time.sleep(0.005)
        finally:
            client.wait(timeout=120)
    err = log.read_text()
    assert client.returncode == 0, err
    ticks = [Tick.parse(m) for m in TICK.finditer(err)]
    assert ticks, f"no tick logged at debug level:\n{err[-3000:]}"
    # what the region shows: 100 while not throttled, the target while throttled (0 before the first tick)
    assert held <= {0, 100} | {t.target for t in ticks if t.mode == "throttle"}, (held, ticks)
    return Run(ticks, held)


def check(limits: Limits, phases: list[dict], ticks: list[Tick], own_pid: bool | None = None) -> None:
    """Each tick against the model: its measurement is one the client's lists give, its target the claim's,
    and its mode and budget what the law makes of the mode and budget the tick before left. `own_pid`: the
    limiter knows its host pid (by default, where this test runs in the host's pid namespace)."""
    if own_pid is None:
        own_pid = os.stat("/proc/self/ns/pid").st_ino == INIT_PID_NS
    lists = {measured(p["rows"], own_pid) for p in phases}
    mode = "count" if limits.cores > 0 or limits.low else "idle"  # set at the first launch
    rate = 0.0
    for i, t in enumerate(ticks):
        where = f"tick {i}: {t}"
        if t.fresh:
            assert (t.claim, t.other, t.neighbour) in lists, where
        target, throttle, counting = expected_target(limits, t)
        assert t.target == target, where
        if not throttle:
            assert t.mode == ("count" if counting else "idle"), where
            assert t.rate == rate, where  # the budget is kept for when throttling starts again
        else:
            assert t.mode == "throttle", where
            want = expected_rate(mode, rate, t)
            assert math.isclose(t.rate, want, rel_tol=1e-9), f"{where}: the law gives {want}"
        mode, rate = t.mode, t.rate


ME = None  # the client's own pid in a sample list


def test_over_its_target_the_budget_is_cut_at_most_eightfold_a_tick_down_to_one_block(
    claim, tmp_path: Path
) -> None:
    """Measured at 90% (two samples of its pid, 100 and 80) against a forced 50%: throttling starts at the
    budget that gives the target, and each tick in which the claim launches nothing cuts it by eight (the
    law's correction would take it to nothing) down to the floor of one block a second."""
    limits = Limits(cores=50, policy="force")
    phases = [phase([(ME, 100), (ME, 80), (7, 3)], launches=8, pause=0.6)]
    ran = run(claim, tmp_path, limits, phases)
    ticks = ran.ticks
    check(limits, phases, ticks)
    throttled = [t for t in ticks if t.mode == "throttle"]
    assert any(t.launched == 0 and t.rate > 1 for t in throttled), ticks  # an eightfold cut
    assert throttled[-1].rate == 1.0, ticks


def test_under_its_target_a_starved_claims_budget_grows_at_most_eightfold_a_tick(
    claim, tmp_path: Path
) -> None:
    """Measured at 10% against a forced 50%: the budget is left alone while no launch waits, and raised
    from what the claim launched when launches wait for it."""
    limits = Limits(cores=50, policy="force")
    phases = [phase([(ME, 10)], launches=1, pause=0.2), phase([(ME, 10)], launches=60, blocks=40, pause=0.1)]
    ran = run(claim, tmp_path, limits, phases)
    ticks = ran.ticks
    check(limits, phases, ticks)
    assert any(t.mode == "throttle" and t.starved and t.claim > 0 for t in ticks), ticks


def test_a_starved_claim_measured_at_nothing_doubles_its_budget(claim, tmp_path: Path) -> None:
    limits = Limits(cores=50, policy="force")
    phases = [phase([(1, 0)], launches=1, pause=0.2), phase([(1, 0)], launches=10, blocks=100)]
    ran = run(claim, tmp_path, limits, phases)
    ticks = ran.ticks
    check(limits, phases, ticks)
    assert any(t.mode == "throttle" and t.starved and t.claim == 0 for t in ticks), ticks


def test_the_default_policy_throttles_only_while_a_neighbour_is_busy(claim, tmp_path: Path) -> None:
    """Others at 4% are no neighbour; at 5% (one pid or two) they are, and the claim is held to its 30%; alone
    again, it bursts (counted, not throttled) and keeps its budget for the next neighbour. Few launches while
    throttled: the fixed samples measure the claim at 50% whatever it runs, so its budget only falls."""
    limits = Limits(cores=30, policy="default")
    phases = [
        phase([(ME, 50), (7, 4)], launches=40, pause=0.1),
        phase([(ME, 50), (7, 3), (8, 2)], launches=4, pause=0.1),
        phase([(ME, 50), (7, 5)], pause=0.1),
        phase([(ME, 50)], launches=40, pause=0.1),
    ]
    ran = run(claim, tmp_path, limits, phases)
    ticks = ran.ticks
    check(limits, phases, ticks)
    assert {t.mode for t in ticks} == {"count", "throttle"}, ticks
    assert 100 in ran.held and 30 in ran.held, ran.held


def test_a_claim_without_a_cores_limit_is_never_throttled(claim, tmp_path: Path) -> None:
    """No share (cores 0) on a GPU where nobody reserved any: a busy neighbour changes nothing, the gate stays
    idle (its launches not even counted)."""
    limits = Limits(cores=0, policy="default")
    phases = [phase([(ME, 50), (7, 50)], launches=20, pause=0.15)]
    ran = run(claim, tmp_path, limits, phases)
    ticks = ran.ticks
    check(limits, phases, ticks)
    assert any(t.neighbour for t in ticks) and {t.mode for t in ticks} == {"idle"}, ticks
    assert 100 in ran.held, ran.held


def test_throttling_that_starts_with_nothing_launched_starts_at_a_thousand_blocks(
    claim, tmp_path: Path
) -> None:
    """A neighbour that turns busy while the claim launches nothing: no launch rate to calibrate on and no
    budget from an earlier throttling, so the budget starts at 1,000 blocks a second and is then cut."""
    limits = Limits(cores=30, policy="default")
    phases = [phase([(ME, 50)], launches=1, pause=0.15), phase([(ME, 50), (7, 20)], pause=0.15)]
    ran = run(claim, tmp_path, limits, phases)
    ticks = ran.ticks
    check(limits, phases, ticks)
    switched = [b for a, b in itertools.pairwise(ticks) if a.mode != "throttle" and b.mode == "throttle"]
    assert switched and switched[0].launched == 0, ticks


def test_a_low_priority_claim_yields_to_no_neighbour_of_its_own_priority(claim, tmp_path: Path) -> None:
    """Busy neighbours, none of them high-priority: the claim keeps its own share (held to it, as any claim is
    while a neighbour is busy), never the low-priority 10%."""
    limits = Limits(cores=60, policy="default", low=True)
    phases = [phase([(ME, 40), (7, 20)], launches=8, pause=0.15)]
    ran = run(claim, tmp_path, limits, phases)
    ticks = ran.ticks
    check(limits, phases, ticks)
    assert {t.target for t in ticks} == {60} and any(t.mode == "throttle" for t in ticks), ticks


@pytest.mark.parametrize("cores", [0, 60, 5])
def test_a_low_priority_claim_yields_to_a_busy_high_priority_neighbour(
    claim, tmp_path: Path, cores: int
) -> None:
    """While a high-priority neighbour is busy the claim is held to 10% (or its own share when lower); when
    none is, it is counted (a neighbour may come back) and throttled only as its own share says."""
    limits = Limits(cores=cores, policy="default", low=True, high_neighbours=True)
    phases = [
        phase([(ME, 40), (7, 20)], launches=8, pause=0.15),
        phase([(ME, 40)], launches=20, pause=0.1),
    ]
    ran = run(claim, tmp_path, limits, phases)
    ticks = ran.ticks
    check(limits, phases, ticks)
    assert {t.target for t in ticks} == {min(cores or 100, LOW_SHARE), cores or 100}, ticks


def test_without_its_host_pid_the_claim_is_the_whole_gpu_and_busy_pids_beyond_its_own_a_neighbour(
    claim, tmp_path: Path
) -> None:
    """In a pid namespace with its own /proc the limiter cannot tell its host pid (test_limiter_host_pid.py)
    and no pid NVML names is known as the claim's: the whole GPU's measurement counts as the claim's, and a
    neighbour is guessed from more pids busy than the claim has processes (one here; an idle pid is none)."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"]).returncode:
        pytest.fail("this test runs the client in a pid namespace: it needs root and unshare(1)")
    limits = Limits(cores=30, policy="default")
    phases = [
        phase([(ME, 40), (7, 20), (8, 0)], launches=4, pause=0.15),
        phase([(ME, 40), (8, 0)], launches=20, pause=0.1),
    ]
    ran = run(claim, tmp_path, limits, phases, wrapper=(unshare, "--pid", "--fork", "--mount-proc"))
    check(limits, phases, ran.ticks, own_pid=False)
    assert {(t.claim, t.neighbour) for t in ran.ticks if t.fresh} == {(60, True), (40, False)}, ran.ticks
    assert {t.mode for t in ran.ticks} == {"count", "throttle"}, ran.ticks
