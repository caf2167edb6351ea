"""Publishing this node's ResourceSlices: reconcile, bump the pool generation, detect disabled gates.

The pool is the node's (pool name = node name). `publish()` lists what the API server has, compares it
with what the device model builds, and only writes when they differ: then every slice gets the next
generation, missing ones are created, changed ones updated (with their resourceVersion, so a concurrent
writer makes us re-read instead of overwriting), stale ones deleted. Conflicts and API errors are retried
with exponential backoff.

Feature detection: a server whose DRAConsumableCapacity or DRAPartitionableDevices gate is off silently
drops `allowMultipleAllocations` / `sharedCounters` / `consumesCounters` on write; one whose
DRADeviceTaints gate is off drops device `taints` (the probe puts one on a device to find out; unhealthy
GPUs are then withdrawn instead of tainted, driver/plugin/health/taints.py). Before its first write
the publisher asks with a dry-run create of each slice (the server admits it, drops what it would drop and
stores nothing), so the scheduler never sees devices the node cannot serve. Should the dry run fail, the
same comparison is made on what a real write stored. The affected GPUs fall back (soft -> slots,
timeslice -> exclusive, mig -> exclusive), with a warning naming the gates and the GPUs.

The gate probe builds the requested strategies and changes nothing on the node; only then does `select`
(driver/plugin/mig/modes.py through the plugin) turn the effective strategies into the ones each GPU's real
MIG mode can serve now, switching modes where it may: the fallback is decided before any mode change.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from driver import names
from driver.cluster.base import ClusterError, Conflict, NotFound
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

GATE_CONSUMABLE = "DRAConsumableCapacity"
GATE_PARTITIONABLE = "DRAPartitionableDevices"
# Device taints off: no strategy changes, unhealthy GPUs are withdrawn instead (driver/plugin/health/).
GATE_TAINTS = "DRADeviceTaints"
PROBE_TAINT = {"key": f"{names.DRIVER_NAME}/probe", "value": "gate", "effect": "NoSchedule"}
PROBE_TAINT_MAX_DEVICES = 64  # a tainted slice holds at most 64 devices from 1.35
FALLBACKS: dict[str, dict[str, str]] = {
    GATE_TAINTS: {},
    GATE_CONSUMABLE: {
        names.STRATEGY_SOFT: names.STRATEGY_SLOTS,
        names.STRATEGY_MPS: names.STRATEGY_SLOTS,
        names.STRATEGY_TIMESLICE: names.STRATEGY_EXCLUSIVE,
    },
    GATE_PARTITIONABLE: {names.STRATEGY_MIG: names.STRATEGY_EXCLUSIVE},
}

BuildSlices = Callable[[dict[int, str], int], list[dict[str, Any]]]
# effective strategies -> the strategies to publish now (GPUs left out are not published)
Select = Callable[[dict[int, str]], dict[int, str]]


class PublishError(Exception):
    """Publishing failed after all retries; the message names the slice and the API error."""


def dropped_gates(desired: list[dict], stored: list[dict]) -> set[str]:
    """Gates whose fields were in what we wrote but not in what the server kept."""
    kept = {s["metadata"]["name"]: s for s in stored}
    gates: set[str] = set()
    for want in desired:
        have = kept.get(want["metadata"]["name"])
        if have is None:
            continue
        wspec, hspec = want["spec"], have.get("spec") or {}
        if wspec.get("sharedCounters") and not hspec.get("sharedCounters"):
            gates.add(GATE_PARTITIONABLE)
        hdevs = {d["name"]: d for d in hspec.get("devices") or []}
        for d in wspec.get("devices") or []:
            h = hdevs.get(d["name"], {})
            if d.get("allowMultipleAllocations") and not h.get("allowMultipleAllocations"):
                gates.add(GATE_CONSUMABLE)
            if d.get("consumesCounters") and not h.get("consumesCounters"):
                gates.add(GATE_PARTITIONABLE)
            if d.get("taints") and not h.get("taints"):
                gates.add(GATE_TAINTS)
    return gates


def with_probe_taint(slice_obj: dict) -> dict:
    """The slice with a taint on its first device (when it may hold a tainted device), for the dry run
    that finds out whether the server keeps device taints."""
    devices = (slice_obj.get("spec") or {}).get("devices") or []
    if not devices or len(devices) > PROBE_TAINT_MAX_DEVICES or devices[0].get("taints"):
        return slice_obj
    first = {**devices[0], "taints": [dict(PROBE_TAINT)]}
    return {**slice_obj, "spec": {**slice_obj["spec"], "devices": [first, *devices[1:]]}}


def fallback(strategies: dict[int, str], gates: set[str]) -> dict[int, str]:
    """The strategies that work with `gates` off: soft -> slots, timeslice/mig -> exclusive."""
    out = dict(strategies)
    for gate in sorted(gates):
        out = {index: FALLBACKS[gate].get(chosen, chosen) for index, chosen in out.items()}
    return out


def _content(slices: list[dict]) -> dict[str, Any]:
    """What must match for two pools to be the same: each slice's spec without the pool generation."""
    out = {}
    for s in slices:
        spec = dict(s.get("spec") or {})
        pool = dict(spec.get("pool") or {})
        pool.pop("generation", None)
        spec["pool"] = pool
        out[s["metadata"]["name"]] = spec
    return out


class Publisher:
    def __init__(
        self,
        cluster,
        node_name: str,
        build: BuildSlices,
        strategies: dict[int, str],
        attempts: int = 6,
        backoff_s: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        select: Select | None = None,
        on_gates_off: Callable[[set[str], dict[int, str]], None] | None = None,
    ):
        self.cluster = cluster
        self.node_name = node_name
        self.build = build
        self.requested = dict(strategies)
        self.effective = dict(strategies)  # after fallbacks
        self.select: Select = select or dict
        self.applied = dict(strategies)  # what was last built for publishing: select(effective)
        self.gates_off: set[str] = set()
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sleep = sleep
        self.generation = 0
        self.last_error = ""
        self._probed = False
        # Told of every newly found disabled gate and the strategies it changed (index -> "soft->slots"): the
        # plugin posts a Node Event and sets a metric, so a default 1.34/1.35 cluster is not silently served
        # whole GPUs and slots only.
        self.on_gates_off = on_gates_off

    def desired(self) -> list[dict]:
        """The slices for the applied strategies (what prepare's catalog is built from)."""
        return self.build(self.applied, max(self.generation, 1))

    def probe(self) -> None:
        """Detect disabled gates (dry-run creates) and set `effective`; once per process, changes nothing."""
        if not self._probed:
            self._probe_gates()

    def publish(self) -> list[dict]:
        """Reconcile until the server holds our pool; raises PublishError after the last attempt."""
        self.probe()
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                stored, desired = self._reconcile()
                gates = dropped_gates(desired, stored) - self.gates_off
                if gates:
                    self._fall_back(gates, "read back after a write")
                    stored, _ = self._reconcile()
                self.last_error = ""
                return stored
            except (Conflict, NotFound) as e:
                why = f"{type(e).__name__}: {e}"  # someone else wrote: re-read and try again
            except ClusterError as e:
                why = f"{type(e).__name__}: {e}"
            self.last_error = why
            event(
                log,
                logging.WARNING,
                "publish.retry",
                attempt=attempt,
                of=self.attempts,
                error=why,
                delay_s=round(delay, 3),
            )
            if attempt < self.attempts:
                self.sleep(delay)
                delay = min(delay * 2, 10.0)
        raise PublishError(f"publishing ResourceSlices of node {self.node_name}: {self.last_error}")

    def _probe_gates(self) -> None:
        """Find disabled gates with dry-run creates (nothing is stored); once per process."""
        self._probed = True
        gates: set[str] = set()
        try:
            probed_taints = False
            for want in self.build(self.requested, 1):
                if not probed_taints and (want.get("spec") or {}).get("devices"):
                    want, probed_taints = with_probe_taint(want), True  # one tainted device is enough
                probe = {**want, "metadata": {"generateName": f"{want['metadata']['name']}-probe-"}}
                got = self.cluster.create_resource_slice(probe, dry_run=True)
                gates |= dropped_gates([want], [{**got, "metadata": want["metadata"]}])
        except ClusterError as e:
            event(
                log,
                logging.WARNING,
                "publish.probe-failed",
                error=f"{type(e).__name__}: {e}",
                action="gates are detected from the first write instead",
            )
            return
        if gates:
            self._fall_back(gates, "dry-run create")

    def request(self, strategies: dict[int, str]) -> dict[int, str]:
        """Ask for other strategies (the node's NodePartitioning changed); the next publish applies them.
        Returns what was asked for before."""
        before = self.requested
        self.requested = dict(strategies)
        self.effective = fallback(self.requested, self.gates_off)
        return before

    def _fall_back(self, gates: set[str], found_by: str) -> None:
        before = self.effective
        self.gates_off |= gates
        self.effective = fallback(self.requested, self.gates_off)
        changed = {i: f"{before[i]}->{self.effective[i]}" for i in before if before[i] != self.effective[i]}
        event(
            log,
            logging.WARNING,
            "publish.gate-off",
            gates=sorted(gates),
            detail="the API server drops the gated fields on write",
            found_by=found_by,
            fallback=changed or "none",
        )
        if self.on_gates_off is not None:
            self.on_gates_off(set(gates), changed)

    def _reconcile(self) -> tuple[list[dict], list[dict]]:
        started = time.monotonic()
        self.applied = self.select(dict(self.effective))
        existing = {
            s["metadata"]["name"]: s
            for s in self.cluster.list_resource_slices(names.DRIVER_NAME, self.node_name)
        }
        current = max((s["spec"].get("pool", {}).get("generation", 0) for s in existing.values()), default=0)
        desired = self.build(self.applied, current)  # compared without the generation (_content)
        if existing and _content(list(existing.values())) == _content(desired) and current:
            self.generation = current
            return sorted(existing.values(), key=lambda s: s["metadata"]["name"]), desired
        # One past what the server has (a partial write of a failed attempt included): consumers then
        # only trust the complete pool we are about to write.
        generation = current + 1
        desired = self.build(self.applied, generation)
        stored = []
        for obj in desired:
            name = obj["metadata"]["name"]
            if name in existing:
                obj = {
                    **obj,
                    "metadata": {
                        **obj["metadata"],
                        "resourceVersion": existing[name]["metadata"]["resourceVersion"],
                    },
                }
                stored.append(self.cluster.update_resource_slice(obj))
            else:
                stored.append(self.cluster.create_resource_slice(obj))
        for name in sorted(set(existing) - {s["metadata"]["name"] for s in desired}):
            with contextlib.suppress(NotFound):
                self.cluster.delete_resource_slice(name)
        self.generation = generation
        event(
            log,
            logging.INFO,
            "publish.done",
            pool=self.node_name,
            generation=generation,
            slices=len(desired),
            devices=sum(len(s["spec"].get("devices") or []) for s in desired),
            strategies=",".join(f"{i}={s}" for i, s in sorted(self.applied.items())) or "none",
            seconds=round(time.monotonic() - started, 4),
        )
        return stored, desired
