"""Each GPU's MIG mode against its strategy: what the GPU can serve now, and switching MIG mode when idle.

The one place that decides, per GPU, which strategy is published and whether MIG mode must change. Inputs:
each GPU's desired strategy (the --strategy flag today, a NodePartitioning entry later), the feature gates
the API server has off, and how many prepared claims each GPU has. Rules:

1. Fallback first: a strategy the API server cannot carry (mig with DRAPartitionableDevices off, ...) is
   replaced (`publisher.fallback`) BEFORE any mode change, so MIG mode is never turned on for a GPU that
   will be published as a plain GPU.
2. A GPU is published only under a strategy its real mode fits: `mig` needs MIG mode on; every other
   strategy needs it off (CUDA cannot use a whole GPU in MIG mode). A GPU that does not fit is not
   published (`applied` None) and carries a `pending` reason.
3. MIG mode is switched (on or off) through NVML only on a GPU with no prepared claim; otherwise the reason
   is "waiting for N prepared claims". MIG is never switched off over GPU instances (they would be lost):
   instances on an idle GPU are instances carve does not own, and the reason says so.
4. A switch NVML leaves pending (the GPU is in use or needs a reset) is reported for that GPU only
   ("needs reset"); the other GPUs keep serving, and the next call tries again.
Stateless: every decision starts from the mode NVML reports (read_modes), so a crash in the middle of a
change needs no record; the next call decides again.

API (small on purpose; the strategy controller's plugin side calls the same two functions):

    gpus = read_modes(gpus, reader)   # the records with the live MIG mode and instances (NVML)
    modes = plan_modes(gpus, desired, gates_off, prepared)            # pure: {index: GpuMode}
    gpus, modes = apply_modes(gpus, desired, switch, gates_off, prepared)  # switches, returns new records
    applied_strategies(modes)   # {index: strategy} of the GPUs to publish now
    prepared_per_gpu(records)   # {gpu uuid: prepared claims} from the checkpoint's ClaimRecords
    mode.status()               # the per-GPU status dict (/status, NodePartitioning status)

`switch` is anything with `set_mig_mode(gpu_uuid, enabled) -> (current, pending)` (driver/plugin/mig/ops.py's
NvmlMig on NVML; a dict in unit tests), `pending` being None when no change is pending; `reader` anything
with `mig_mode(gpu_uuid) -> (current, pending)` and `instances(gpu_uuid)` (NvmlMig too). Modes change behind
the records' back (the preparer turns MIG off for a whole-GPU claim, an admin runs nvidia-smi), so call
read_modes before each decision.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from driver import names
from driver.gpu.model import Gpu, MigInstance
from driver.plugin.logfmt import event
from driver.plugin.publisher import fallback
from driver.plugin.state.checkpoint import ClaimRecord

log = logging.getLogger(__name__)

ENABLE, DISABLE = "enable-mig", "disable-mig"
NEEDS_RESET = "needs reset"


class MigModeReader(Protocol):
    def mig_mode(self, gpu_uuid: str) -> tuple[bool, bool | None]: ...

    def instances(self, gpu_uuid: str) -> list[MigInstance]: ...


class MigModeSwitch(Protocol):
    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> tuple[bool, bool | None]:
        """Ask NVML for MIG mode on/off; returns (current mode, pending mode or None when none is pending)."""
        ...


@dataclass(frozen=True)
class GpuMode:
    """One GPU's mode decision and status."""

    index: int
    uuid: str
    desired: str  # the strategy asked for
    effective: str  # after the feature-gate fallback
    applied: str | None  # published now; None: the GPU's real mode does not fit `effective` (yet)
    mig_enabled: bool  # the real, current MIG mode
    pending: str = ""  # why `applied` is not `effective`, e.g. "needs reset", "waiting for 2 prepared claims"
    action: str = ""  # what apply_modes does: ENABLE, DISABLE or ""
    fallback: str = ""  # why `effective` is the fallback strategy, not `desired` (MIG mode refused)

    def status(self) -> dict:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "desired": self.desired,
            "strategy": self.effective,
            "applied": self.applied,
            "migMode": "enabled" if self.mig_enabled else "disabled",
            "pending": self.pending,
        }


def fits(gpu: Gpu, strategy: str) -> bool:
    """Whether the GPU's current MIG mode can serve `strategy`."""
    return gpu.mig_enabled == (strategy == names.STRATEGY_MIG)


def read_modes(gpus: list[Gpu], reader: MigModeReader) -> list[Gpu]:
    """The records with their live MIG mode and instances; a GPU NVML cannot answer for keeps its record."""
    out = []
    for gpu in gpus:
        if gpu.mig_capable:
            try:
                current, pending = reader.mig_mode(gpu.uuid)
                live = tuple(reader.instances(gpu.uuid)) if current else ()
                gpu = dataclasses.replace(gpu, mig_enabled=current, mig_pending=pending, mig_instances=live)
            except Exception as e:
                event(
                    log,
                    logging.WARNING,
                    "mig.mode-unreadable",
                    gpu=gpu.name,
                    error=f"{type(e).__name__}: {e}",
                )
        out.append(gpu)
    return out


def prepared_per_gpu(records: Iterable[ClaimRecord]) -> dict[str, int]:
    """Prepared (or half-prepared) claims per physical GPU UUID."""
    counts: dict[str, int] = {}
    for record in records:
        # An admin-access device (claims/admin.py) rides along: it never holds up a mode change.
        for uuid in {d.gpu_uuid for d in record.devices if d.gpu_uuid and not d.admin}:
            counts[uuid] = counts.get(uuid, 0) + 1
    return counts


def _plan_one(
    gpu: Gpu, desired: str, effective: str, prepared: int, refused: str = "", fallback_to: str = ""
) -> GpuMode:
    why = ""
    if effective == names.STRATEGY_MIG and refused and fallback_to:
        # NVML refused MIG mode on this GPU earlier: it serves the fallback rather than nothing.
        effective, why = fallback_to, refused
    mode = GpuMode(gpu.index, gpu.uuid, desired, effective, None, gpu.mig_enabled, fallback=why)
    want_mig = effective == names.STRATEGY_MIG
    if want_mig and not gpu.mig_capable:
        return dataclasses.replace(mode, pending=f"{gpu.name} ({gpu.product}) has no MIG support")
    if fits(gpu, effective):
        # A change away from the fitting mode left pending (by hand, or by an earlier desire) would apply at
        # the next reset: cancel it on an idle GPU by asking for the current mode again.
        cancel = gpu.mig_pending is not None and not prepared
        return dataclasses.replace(mode, applied=effective, action=(ENABLE if want_mig else DISABLE) * cancel)
    if prepared:
        s = "s" if prepared > 1 else ""
        return dataclasses.replace(mode, pending=f"waiting for {prepared} prepared claim{s}")
    if not want_mig and gpu.mig_instances:
        # Switching MIG off would destroy them; carve destroys only instances its records name (recovery
        # has done that by now), so these belong to someone else.
        ids = ", ".join(m.uuid or f"gi{m.gpu_instance_id}" for m in gpu.mig_instances)
        return dataclasses.replace(mode, pending=f"MIG instances carve did not create are on the GPU: {ids}")
    return dataclasses.replace(mode, pending="switching MIG mode", action=ENABLE if want_mig else DISABLE)


def plan_modes(
    gpus: list[Gpu],
    desired: dict[int, str],
    gates_off: set[str] | frozenset[str] = frozenset(),
    prepared: dict[str, int] | None = None,
    refused: dict[str, str] | None = None,
    fallback_to: str = "",
) -> dict[int, GpuMode]:
    """Each GPU's decision, without touching anything. GPUs missing from `desired` are `exclusive`.
    `refused`: GPU uuid -> why NVML would not switch its MIG mode on; with `fallback_to`, such a GPU
    asked for mig serves `fallback_to` instead (--fallback-strategy)."""
    wanted = {g.index: desired.get(g.index, names.STRATEGY_EXCLUSIVE) for g in gpus}
    effective = fallback(wanted, set(gates_off))
    prepared = prepared or {}
    refused = refused or {}
    return {
        g.index: _plan_one(
            g,
            wanted[g.index],
            effective[g.index],
            prepared.get(g.uuid, 0),
            refused.get(g.uuid, ""),
            fallback_to,
        )
        for g in gpus
    }


def apply_modes(
    gpus: list[Gpu],
    desired: dict[int, str],
    switch: MigModeSwitch,
    gates_off: set[str] | frozenset[str] = frozenset(),
    prepared: dict[str, int] | None = None,
    refused: dict[str, str] | None = None,
    fallback_to: str = "",
) -> tuple[list[Gpu], dict[int, GpuMode]]:
    """plan_modes, then the switches it asks for; returns the GPU records with their new modes and the
    final decisions. Never raises for one GPU: a failed switch is that GPU's `pending` reason, or, for
    MIG mode refused with `fallback_to` given, the GPU serves `fallback_to` and `refused` (updated in
    place: the caller keeps it) remembers why, so the switch is not tried again at every publish.

    Call with whatever lock keeps claims from being prepared meanwhile (the preparer's node lock).
    """
    planned = plan_modes(gpus, desired, gates_off, prepared, refused, fallback_to)
    out_gpus: list[Gpu] = []
    out: dict[int, GpuMode] = {}
    for gpu in gpus:
        mode = planned[gpu.index]
        if mode.action:
            gpu, mode = _switch(gpu, mode, switch)
            if (
                mode.action == ""
                and mode.pending.startswith("cannot enable")
                and fallback_to
                and refused is not None
            ):
                refused[gpu.uuid] = mode.pending
                mode = _plan_one(gpu, mode.desired, mode.effective, 0, mode.pending, fallback_to)
                if mode.action:  # e.g. the fallback needs MIG off and NVML left it on: try that once
                    gpu, mode = _switch(gpu, mode, switch)
        out_gpus.append(gpu)
        out[gpu.index] = mode
    return out_gpus, out


def _switch(gpu: Gpu, mode: GpuMode, switch: MigModeSwitch) -> tuple[Gpu, GpuMode]:
    enable = mode.action == ENABLE
    try:
        current, pending = switch.set_mig_mode(gpu.uuid, enable)
    except Exception as e:  # one GPU's NVML error must not stop the others (or the plugin)
        reason = f"cannot {'enable' if enable else 'disable'} MIG mode: {type(e).__name__}: {e}"
        event(log, logging.ERROR, "mig.mode-failed", gpu=gpu.name, uuid=gpu.uuid, error=reason)
        return gpu, dataclasses.replace(
            mode, applied=None if not fits(gpu, mode.effective) else mode.applied, pending=reason, action=""
        )
    gpu = dataclasses.replace(gpu, mig_enabled=current, mig_pending=pending)
    if fits(gpu, mode.effective):
        if mode.applied is None:
            event(
                log,
                logging.INFO,
                "mig.mode-" + ("enabled" if current else "disabled"),
                gpu=gpu.name,
                uuid=gpu.uuid,
                strategy=mode.effective,
            )
        return gpu, dataclasses.replace(
            mode, applied=mode.effective, mig_enabled=current, pending="", action=""
        )
    event(
        log,
        logging.WARNING,
        "mig.mode-pending",
        gpu=gpu.name,
        uuid=gpu.uuid,
        wanted="enabled" if enable else "disabled",
        current="enabled" if current else "disabled",
        reason=NEEDS_RESET,
        action="not published until the change applies; retried at each publish",
    )
    return gpu, dataclasses.replace(mode, applied=None, mig_enabled=current, pending=NEEDS_RESET, action="")


def applied_strategies(modes: dict[int, GpuMode]) -> dict[int, str]:
    """{index: strategy} of the GPUs that are published now."""
    return {i: m.applied for i, m in sorted(modes.items()) if m.applied is not None}
