"""What the live controller has seen of the workload: each pod's claims, when they arrived, when they
were allocated and when they let go, as a trace for the simulator's portfolio (layout.py).

Pure bookkeeping over the claims the informer lists at each plan (no API calls): a claim first seen is
stamped with its creationTimestamp (else the time it was seen), its first allocation and its end (the
allocation gone, or the claim gone once allocated). Claims of one pod (its owner, else the pod that
reserved it) form one trace pod, as they must be allocated together. Bounded: at most `max_pods` pods, the
oldest dropped first, and none that ended more than `window_s` ago.
"""

from __future__ import annotations

import calendar
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from driver.controller.inputs import claim_problem
from driver.controller.planner import claim_types
from driver.simulate.inputs import TracePod

DEFAULT_DURATION_S = 3600.0  # a pod's run time when none has ended yet to learn one from


def _created(meta: dict[str, Any], now: float) -> float:
    stamp = meta.get("creationTimestamp")
    if isinstance(stamp, str):
        try:
            return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
        except ValueError:
            pass
    return now


def _pod_of(claim: dict[str, Any]) -> str | None:
    """The pod a claim is for: its owner (a claim from a pod's template), else the first that reserved it."""
    refs = [r for r in (claim.get("metadata") or {}).get("ownerReferences") or []
            if isinstance(r, dict) and r.get("kind") == "Pod"]
    refs += [r for r in (claim.get("status") or {}).get("reservedFor") or []
             if isinstance(r, dict) and r.get("resource") == "pods"]
    return next((r["name"] for r in refs if isinstance(r.get("name"), str) and r["name"]), None)


@dataclass
class _Seen:
    key: str  # the pod's "ns/name", else the claim's
    arrival: float
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # claim uid -> spec
    allocated_at: float | None = None
    ended_at: float | None = None
    live: set[str] = field(default_factory=set)  # claim uids still listed


class ClaimLog:
    def __init__(self, window_s: float = 24 * 3600.0, max_pods: int = 2000) -> None:
        self.window_s = window_s
        self.max_pods = max_pods
        self.pods: dict[str, _Seen] = {}
        self._claim_pod: dict[str, str] = {}  # claim uid -> pod key

    def update(self, claims: list[dict[str, Any]], now: float) -> None:
        """Fold in the claims listed now. Claims outside carve's device classes are left out (the
        simulator models only carve's devices)."""
        listed: dict[str, set[str]] = {}
        for claim in claims:
            meta = claim.get("metadata") or {}
            uid, ns, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
            spec = claim.get("spec")
            if not (isinstance(uid, str) and isinstance(ns, str) and isinstance(name, str)
                    and isinstance(spec, dict)) or claim_problem(claim) or claim_types([claim]) is None:
                continue  # a malformed claim (the reconciler warns about it) or not carve's devices
            pod = f"{ns}/{_pod_of(claim) or name}"
            key = self._claim_pod.setdefault(uid, pod)
            seen = self.pods.get(key)
            if seen is None:
                seen = self.pods[key] = _Seen(key, _created(meta, now))
            seen.specs.setdefault(uid, spec)
            listed.setdefault(key, set()).add(uid)
            allocated = bool((claim.get("status") or {}).get("allocation"))
            if allocated and seen.allocated_at is None:
                seen.allocated_at = now
            if not allocated and seen.allocated_at is not None and seen.ended_at is None:
                seen.ended_at = now
        for key, seen in self.pods.items():
            gone = seen.live - listed.get(key, set())
            seen.live = listed.get(key, set())
            if gone and seen.allocated_at is not None and seen.ended_at is None:
                seen.ended_at = now
        self._trim(now)

    def _trim(self, now: float) -> None:
        for key in [k for k, s in self.pods.items()
                    if s.ended_at is not None and now - s.ended_at > self.window_s]:
            del self.pods[key]
        extra = len(self.pods) - self.max_pods
        if extra > 0:
            for key in sorted(self.pods, key=lambda k: self.pods[k].arrival)[:extra]:
                del self.pods[key]
        keep = set(self.pods)
        self._claim_pod = {u: k for u, k in self._claim_pod.items() if k in keep}

    def trace(self, now: float) -> list[TracePod]:
        """The pods seen, as a trace from the first arrival: an ended pod runs as long as it held its
        claims; a running one at least as long as it has so far, and the median of the ended ones if more;
        a pending one the median (DEFAULT_DURATION_S while none has ended)."""
        ended = [s.ended_at - s.allocated_at for s in self.pods.values()
                 if s.ended_at is not None and s.allocated_at is not None]
        typical = statistics.median(ended) if ended else DEFAULT_DURATION_S
        seen = sorted(self.pods.values(), key=lambda s: (s.arrival, s.key))
        if not seen:
            return []
        start = seen[0].arrival
        out = []
        for s in seen:
            if s.ended_at is not None and s.allocated_at is not None:
                duration = s.ended_at - s.allocated_at
            elif s.allocated_at is not None:
                duration = max(now - s.allocated_at, typical)
            else:
                duration = typical
            out.append(TracePod(s.key, max(0.0, s.arrival - start), max(1.0, duration),
                                tuple(s.specs[u] for u in sorted(s.specs))))
        return out
