"""Which pods consume a prepared claim, for the `pod_namespace` / `pod` labels of per-claim series.

The checkpoint knows claims, not pods; the claim's `status.reservedFor` names its consumers. The exporter
asks the API server (the plugin already may GET its claims) once per claim and remembers the answer for
`ttl_s`, so a scrape costs no API call in the steady state and the API load is bounded by the number of
claims on the node. A claim that cannot be read gets empty pod labels rather than failing the scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from driver.plugin.state.checkpoint import ClaimRecord

Pod = tuple[str, str]  # (namespace, name)
NO_POD: Pod = ("", "")


def consumers(claim: dict[str, Any]) -> list[Pod]:
    """The pods in a claim's status.reservedFor, sorted (the first is the one per-claim series name)."""
    ns = (claim.get("metadata") or {}).get("namespace", "")
    refs = (claim.get("status") or {}).get("reservedFor") or []
    return sorted({(ns, str(r["name"])) for r in refs if r.get("resource") == "pods" and r.get("name")})


class ClaimPods:
    def __init__(
        self,
        get_claim: Callable[[str, str], dict[str, Any]],
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.get_claim = get_claim
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, list[Pod]]] = {}  # claim uid -> (when read, its pods)

    def pods(self, record: ClaimRecord) -> list[Pod]:
        now = self.clock()
        with self._lock:
            hit = self._known.get(record.uid)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        try:
            claim = self.get_claim(record.namespace, record.name)
        except Exception:  # a scrape never fails for one claim; its pod labels stay as last known
            found: list[Pod] = hit[1] if hit else []
        else:
            same = (claim.get("metadata") or {}).get("uid") == record.uid
            found = consumers(claim) if same else []
        with self._lock:
            self._known[record.uid] = (now, found)
        return found

    def first(self, record: ClaimRecord) -> Pod:
        found = self.pods(record)
        return found[0] if found else NO_POD

    def forget_except(self, uids: set[str]) -> None:
        with self._lock:
            for uid in set(self._known) - uids:
                del self._known[uid]
