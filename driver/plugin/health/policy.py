"""GPU health policy, pure: which NVML signals make a GPU unhealthy, for how long, and the taint it gets.

The monitor (monitor.py) feeds observations in; `HealthBook` keeps one record per GPU and answers which
GPUs are unhealthy now and why. The XID table follows NVIDIA's DRA driver (k8s-dra-driver-gpu,
cmd/gpu-kubelet-plugin/device_health.go): a short list of XIDs caused by the application (a bad kernel,
a page fault of its own, a preempted context) is ignored; every other critical XID marks the GPU
unhealthy. docs/health.md has the table with what each known XID means.

Causes are short, stable strings used as the taint value, the Event reason's detail and the metric label
(bounded: `xid` is the label of every XID, the number goes only in the taint value and the logs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from driver import names

TAINT_KEY = f"{names.DRIVER_NAME}/unhealthy"
CAUSE_LOST = "gpu-lost"
CAUSE_PAGES = "ecc-pages-pending"
CAUSE_EVENT_ERROR = "nvml-event-error"
EFFECTS = ("NoSchedule", "NoExecute", "None")

# Application errors: the process that caused them is at fault, the GPU is fine (NVIDIA's skip list).
APPLICATION_XIDS: dict[int, str] = {
    13: "graphics engine exception (the application's kernel faulted)",
    31: "GPU memory page fault (the application touched memory it does not own)",
    43: "GPU stopped processing (the application's context was killed)",
    45: "preemptive cleanup after an earlier error of the application",
    68: "video processor exception (NVDEC/NVENC, the application's stream)",
    109: "context switch timeout (the application's context was preempted)",
}
# Known fatal XIDs, for the docs and the log; any XID not in APPLICATION_XIDS counts as fatal.
FATAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the GPU needs a reset)",
    95: "uncontained ECC error (the GPU needs a reset)",
    119: "GSP RPC timeout",
    120: "GSP error",
}

# Bounded metric labels: every cause maps to one of these.
REASONS = ("xid", CAUSE_LOST, CAUSE_PAGES, CAUSE_EVENT_ERROR)
_PRIORITY = {CAUSE_LOST: 3, CAUSE_PAGES: 2, CAUSE_EVENT_ERROR: 1}  # level signals outrank a single XID


class HealthConfigError(ValueError):
    """A health flag with a bad value; the message names the flag."""


def parse_xids(text: str, flag: str = "--health-ignore-xids") -> frozenset[int]:
    """'13, 31,43' -> {13, 31, 43}; anything but comma-separated non-negative integers is refused."""
    out = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if not re.fullmatch(r"\d{1,6}", part):
            raise HealthConfigError(f"{flag}: {part!r} is not an XID number")
        out.add(int(part))
    return frozenset(out)


def check_effect(effect: str, flag: str) -> str:
    if effect not in EFFECTS:
        raise HealthConfigError(f"{flag}: {effect!r} is not one of {', '.join(EFFECTS)}")
    return effect


def xid_cause(xid: int, ignored: Iterable[int]) -> str | None:
    """The cause an XID event gives its GPU ('xid-79'), None for an application error or an ignored XID."""
    if xid in APPLICATION_XIDS or xid in set(ignored):
        return None
    return f"xid-{xid}"


def reason_label(cause: str) -> str:
    """The bounded metric label of a cause."""
    return "xid" if cause.startswith("xid-") else cause if cause in REASONS else "other"


def describe(cause: str) -> str:
    """A sentence for Events, logs and the pod's health message."""
    if cause.startswith("xid-"):
        n = int(cause.removeprefix("xid-"))
        return f"critical XID {n}: {FATAL_XIDS.get(n, 'a GPU error the driver reports as critical')}"
    return {
        CAUSE_LOST: "the GPU is lost (fell off the bus or stopped answering NVML)",
        CAUSE_PAGES: "ECC memory pages or rows are pending retirement/remapping (the GPU needs a reset)",
        CAUSE_EVENT_ERROR: "NVML's event wait failed for this GPU",
    }.get(cause, cause)


@dataclass(frozen=True)
class TaintPolicy:
    """Which effect a cause's taint gets; 'None' for effect means a warning-only taint (1.35+)."""

    effect: str = "NoSchedule"
    lost_effect: str = "NoSchedule"  # NoExecute evicts the pods of a lost GPU (admin opt-in)

    def taint(self, cause: str) -> dict[str, str]:
        effect = self.lost_effect if cause == CAUSE_LOST else self.effect
        return {"key": TAINT_KEY, "value": cause, "effect": effect}


@dataclass
class GpuHealth:
    uuid: str
    index: int
    cause: str = ""  # "" = healthy
    last_bad: float = 0.0  # when the cause was last observed (an XID, or a level signal still present)
    changed: float = 0.0  # when healthy/unhealthy last flipped

    @property
    def healthy(self) -> bool:
        return not self.cause


@dataclass
class Change:
    """One flip, for Events, metrics and the health stream."""

    uuid: str
    index: int
    healthy: bool
    cause: str  # the cause that made it unhealthy, or that it recovered from


@dataclass
class HealthBook:
    """Health per GPU. Bad observations mark a GPU unhealthy at once; it recovers only after
    `recovery_s` without any (`tick`), or at an admin reset."""

    recovery_s: float = 300.0
    gpus: dict[str, GpuHealth] = field(default_factory=dict)

    def track(self, uuid: str, index: int) -> None:
        self.gpus.setdefault(uuid, GpuHealth(uuid, index))

    def observe(self, uuid: str, cause: str, now: float) -> Change | None:
        """A bad observation; returns the Change when the GPU was healthy before."""
        g = self.gpus.get(uuid)
        if g is None:
            return None
        g.last_bad = now
        if g.healthy:
            g.cause, g.changed = cause, now
            return Change(uuid, g.index, False, cause)
        if _PRIORITY.get(cause, 0) >= _PRIORITY.get(g.cause, 0):
            g.cause = cause  # the latest, or the graver, cause names the taint
        return None

    def tick(self, now: float) -> list[Change]:
        """GPUs whose last bad observation is `recovery_s` old become healthy."""
        out = []
        for g in self.gpus.values():
            if not g.healthy and now - g.last_bad >= self.recovery_s:
                out.append(Change(g.uuid, g.index, True, g.cause))
                g.cause, g.changed = "", now
        return out

    def reset(self, uuids: Iterable[str], now: float) -> list[Change]:
        """Admin action: these GPUs are healthy now (a signal still present marks them again)."""
        out = []
        for u in uuids:
            g = self.gpus.get(u)
            if g is not None and not g.healthy:
                out.append(Change(g.uuid, g.index, True, g.cause))
                g.cause, g.changed = "", now
        return out

    def unhealthy(self) -> dict[int, str]:
        """GPU index -> cause, for the GPUs unhealthy now."""
        return {g.index: g.cause for g in self.gpus.values() if not g.healthy}
