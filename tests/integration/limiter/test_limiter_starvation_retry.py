"""The retry rule of the limiter's timing tests (cpu_starvation.py): a group is measured again only when one
of its clients waited for a CPU, only that group, at most ATTEMPTS times, and the reason stays visible."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cpu_starvation import ATTEMPTS, MAX_WAIT_FRACTION, RunQueueWatch, measure, schedstat_wait_ns


class FakeWatch:
    def __init__(self, waits: dict[str, float]) -> None:
        self.waits = waits

    def waited_fraction(self, name: str) -> float | None:
        return self.waits.get(name)


def test_only_starved_groups_are_measured_again_with_the_reason(tmp_path):
    calls: list[list[str]] = []
    starving = {"a1": [0.20, 0.01], "b1": [0.0]}  # a1 starves on the first attempt only

    def run(names: list[str], root: Path):
        calls.append(list(names))
        waits = {n: starving[n].pop(0) if n in starving else 0.0 for n in names}
        return {n: {"overall": len(calls)} for n in names}, FakeWatch(waits)

    got = measure({"a": ["a1", "a2"], "b": ["b1"]}, run, tmp_path)
    assert calls == [["a1", "a2", "b1"], ["a1", "a2"]]
    assert got["a1"]["overall"] == 2 and got["a2"]["attempts"] == 2 and got["b1"]["overall"] == 1
    assert got["a1"]["starvation"] == ["attempt 1: a1 waited 20.0% of its run for a CPU"]
    assert "starvation" not in got["b1"]


def test_a_group_still_starved_after_the_last_attempt_keeps_its_note(tmp_path):
    def run(names, root):
        return {n: {"overall": 1} for n in names}, FakeWatch({n: 2 * MAX_WAIT_FRACTION for n in names})

    got = measure({"a": ["a1"]}, run, tmp_path)
    assert got["a1"]["attempts"] == ATTEMPTS and len(got["a1"]["starvation"]) == ATTEMPTS


def test_the_run_queue_wait_of_a_live_client_is_read_from_the_kernel():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    try:
        assert schedstat_wait_ns(p.pid) is not None
        watch = RunQueueWatch({"sleeper": p})
        p.wait()
        watch.join()
        frac = watch.waited_fraction("sleeper")
        assert frac is not None and 0.0 <= frac < 0.5  # a sleeping process hardly waits for a CPU
    finally:
        p.kill()
