"""Measurements of the compute limiter that are only valid when the client got the CPU it asked for.

The throttle tests run saturating launch loops on fake GPUs and read the occupancy the fake GPU's timeline
records for each client over wall time. The limiter paces a client by sleeping until its budget allows the
next launch; a client that is runnable but waits for a CPU launches nothing in that time, and the fake
GPU's timeline shows the lost time as idle: its share drops below what the limiter granted. On a 2-core
machine running a dozen such clients next to other work, that wait was the cause of the two failures seen
(`test_limiter_shares`, the live change of `test_limiter_throttle`): the limiter was right, the client
had not run.

So each client's time spent waiting on a run queue is read from /proc/<pid>/schedstat (the kernel's
own accounting, second field, ns) while it runs, from the start of its launch loop. A scenario whose
clients waited more than `MAX_WAIT_FRACTION` of their lifetime is measured again, with only the starved
scenarios running (less contention), up to `ATTEMPTS` times in all; each retry carries its reason (which
client waited how long), shown in the result and in any assertion message. A scenario still starved after
the last attempt keeps its last measurement and the note: the assertion then decides, and says why if it
fails.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A client that waits a fraction f of the window for a CPU can lose up to about f x 100 points of occupancy
# (less in practice: the limiter's budget carries some of it over); the assertions allow 5 points.
MAX_WAIT_FRACTION = 0.05
WARMUP_S = 0.3  # exec and setup, before the launch loop (and the client's own clock) starts
ATTEMPTS = 3


def schedstat_wait_ns(pid: int) -> int | None:
    """Nanoseconds the task has waited on a run queue, or None (no schedstat, or the task is gone)."""
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text().split()
        return int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class RunQueueWatch:
    """Samples the run-queue wait of each client until it exits."""

    procs: dict[str, subprocess.Popen]
    period_s: float = 0.02
    first: dict[str, int] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    ended: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        time.sleep(WARMUP_S)
        self.started = time.monotonic()
        while len(self.ended) < len(self.procs):
            for name, p in self.procs.items():
                if name in self.ended:
                    continue
                wait = schedstat_wait_ns(p.pid) if p.poll() is None else None
                if wait is None:
                    self.ended[name] = time.monotonic()
                    continue
                self.first.setdefault(name, wait)
                self.last[name] = wait
            time.sleep(self.period_s)

    def join(self) -> None:
        self._thread.join(timeout=30)

    def waited_fraction(self, name: str) -> float | None:
        """Share of the client's observed lifetime spent waiting for a CPU; None when unknown."""
        if name not in self.first:
            return None
        lifetime = self.ended.get(name, time.monotonic()) - self.started
        return (self.last[name] - self.first[name]) / 1e9 / max(lifetime, 1e-3)


# run(names, attempt_dir) -> {name: parsed client output}, the watch over its clients
Runner = Callable[[list[str], Path], tuple[dict[str, dict[str, Any]], RunQueueWatch]]


def measure(groups: dict[str, list[str]], run: Runner, root: Path) -> dict[str, dict[str, Any]]:
    """Run every group's scenarios (together), again for the groups whose clients starved; each result
    gets `attempts` and, when a retry happened or starvation remained, `starvation` notes."""
    results: dict[str, dict[str, Any]] = {}
    notes: dict[str, list[str]] = {g: [] for g in groups}
    todo = list(groups)
    for attempt in range(1, ATTEMPTS + 1):
        names = [n for g in todo for n in groups[g]]
        out, watch = run(names, root / f"attempt-{attempt}")
        retry = []
        for g in todo:
            starved = []
            for n in groups[g]:
                frac = watch.waited_fraction(n)
                if frac is not None and frac > MAX_WAIT_FRACTION:
                    starved.append(f"{n} waited {frac:.1%} of its run for a CPU")
            for n in groups[g]:
                results[n] = {**out[n], "attempts": attempt}
            if starved:
                notes[g].append(f"attempt {attempt}: " + "; ".join(starved))
                if attempt < ATTEMPTS:
                    retry.append(g)
        todo = retry
        if not todo:
            break
    for g, members in groups.items():
        if notes[g]:
            for n in members:
                results[n]["starvation"] = notes[g]
    return results
