"""The plugin's side of NodePartitioning, the pure half: which strategy each GPU should run, the record of
the change in progress kept on disk, and the status written back. The loop that watches the object and
applies it is partitioning.py.

- Desired strategies: the spec's entries, by index or UUID; a GPU the spec does not name keeps the
  plugin's --strategy. An entry that names no GPU of this node, or asks for MIG on a GPU without it, or a
  MIG profile (or placement) the GPU's model does not have, is a problem reported in the status (Degraded)
  and ignored; so is a migLayout whose placements overlap. A valid migLayout restricts the GPU's
  published devices to the layout's MIG devices (driver/devices/mig.py within_layout); instances are still
  created at prepare, as claims ask.
- The change in progress (`<plugin-dir>/partitioning.json`, written atomically, 0600): the generation
  being applied, the strategies and migLayouts asked for, those before, and the layouts published now. A
  plugin that crashes mid-change finds it at start: it resumes the change (the spec still asks for it) or
  rolls back to the previous strategies and layouts (the NodePartitioning is gone); either way it first
  publishes the layouts the record says are published.
- Layouts (`layouts_now`): like a strategy (modes.py), a GPU's published layout changes only while the GPU
  has no prepared claim; until then it keeps the layout it has, and the status says what the new one waits
  for.
- Status: per GPU the strategy it is published under (absent while it is not published), its MIG mode
  and why the desired strategy is not applied yet; conditions Applied and Degraded; observedGeneration.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from api.v1alpha1.partitioning import NodePartitioning
from driver import names
from driver.devices.mig import LayoutSlot
from driver.devices.rules import SOURCE_CONTROLLER, SOURCE_DEFAULT, SOURCE_FALLBACK, SOURCE_PINNED
from driver.fsutil import write_atomic
from driver.gpu.model import Gpu

STATE_FILE = "partitioning.json"
# 1: the version field itself; a record without one (version 0, carve before it) has the same fields,
# layouts optional. A newer version than this is not guessed at: the spec is applied again.
STATE_VERSION = 1
READABLE_STATE_VERSIONS = (0, 1)
APPLYING, APPLIED = "applying", "applied"
NEEDS_RESET = "needs reset"  # modes.py's reason for a mode change NVML left pending


class ModeLike(Protocol):
    """What the status needs of one GPU's decision (driver/plugin/mig/modes.py's GpuMode)."""

    index: int
    uuid: str
    desired: str
    effective: str
    applied: str | None
    mig_enabled: bool
    pending: str
    fallback: str


Layouts = dict[int, tuple[LayoutSlot, ...]]  # GPU index -> its migLayout; a GPU absent has none


@dataclass
class ChangeRecord:
    generation: int
    desired: dict[int, str]
    previous: dict[int, str]
    state: str = APPLYING
    layouts: Layouts = field(default_factory=dict)  # asked for, with `desired`
    previous_layouts: Layouts = field(default_factory=dict)  # before, with `previous`
    published_layouts: Layouts = field(default_factory=dict)  # in the slices now (written before a publish)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "generation": self.generation,
                "state": self.state,
                "desired": {str(k): v for k, v in sorted(self.desired.items())},
                "previous": {str(k): v for k, v in sorted(self.previous.items())},
                "layouts": _layouts_json(self.layouts),
                "previousLayouts": _layouts_json(self.previous_layouts),
                "publishedLayouts": _layouts_json(self.published_layouts),
            },
            sort_keys=True,
        ).encode()


def _layouts_json(layouts: Layouts) -> dict[str, list]:
    return {str(k): [list(s) for s in v] for k, v in sorted(layouts.items())}


def _layouts(raw: dict[str, list] | None) -> Layouts:
    # A record written before layouts were recorded has none: every placement, what was published then.
    return {
        int(k): tuple((str(p), None if n is None else int(n)) for p, n in v) for k, v in (raw or {}).items()
    }


def read_record(plugin_dir: Path) -> ChangeRecord | None:
    """The recorded change, or None (none, or unreadable: then the spec is simply applied again)."""
    try:
        raw = json.loads((plugin_dir / STATE_FILE).read_text())
        if raw.get("version", 0) not in READABLE_STATE_VERSIONS:
            return None
        return ChangeRecord(
            int(raw["generation"]),
            {int(k): str(v) for k, v in raw["desired"].items()},
            {int(k): str(v) for k, v in raw["previous"].items()},
            str(raw["state"]),
            _layouts(raw.get("layouts")),
            _layouts(raw.get("previousLayouts")),
            _layouts(raw.get("publishedLayouts")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_record(plugin_dir: Path, record: ChangeRecord) -> None:
    write_atomic(plugin_dir / STATE_FILE, record.to_json(), mode=0o600)


@dataclass
class Desired:
    strategies: dict[int, str]
    problems: list[str] = field(default_factory=list)
    layouts: Layouts = field(default_factory=dict)  # GPU index -> its migLayout
    sources: dict[int, str] = field(default_factory=dict)  # GPU index -> who set it (rules.SOURCES)


def layouts_now(
    published: Layouts, desired: Layouts, prepared: dict[int, int]
) -> tuple[Layouts, dict[int, str]]:
    """The layouts to publish and, per GPU, why its desired layout waits (`prepared`: prepared claims per GPU
    index). A GPU's MIG devices change only while it has no prepared claim, as its strategy does (modes.py):
    a claim on a device the new layout drops would lose it from the slices, and the scheduler would stop
    counting the memory slices it holds."""
    now: Layouts = {}
    waits: dict[int, str] = {}
    for index in sorted(set(published) | set(desired)):
        old, new, busy = published.get(index), desired.get(index), prepared.get(index, 0)
        keep = old if old != new and busy else new
        if keep is not None:
            now[index] = keep
        if old != new and busy:
            waits[index] = f"waiting for {busy} prepared claim{'s' if busy > 1 else ''} (migLayout)"
    return now, waits


def _overlapping(gpu: Gpu, layout: list[tuple[str, int]]) -> list[str]:
    """Pairs of layout slots (with placements) whose memory slices overlap on this GPU."""
    spans = []
    for profile, start in layout:
        size = next(
            pl.size for p in gpu.mig_profiles if p.name == profile for pl in p.placements if pl.start == start
        )
        spans.append((f"{profile}@{start}", range(start, start + size)))
    return [
        f"{a} and {b}" for i, (a, ra) in enumerate(spans) for b, rb in spans[i + 1 :] if set(ra) & set(rb)
    ]


def desired_strategies(
    np: NodePartitioning | None,
    gpus: Iterable[Gpu],
    default: dict[int, str],
    pinned: frozenset[int] | set[int] = frozenset(),
    sources: dict[int, str] | None = None,
) -> Desired:
    """Each GPU's strategy under the NodePartitioning (None: the defaults, i.e. the --strategy flag).

    `pinned`: GPUs whose strategy the admin set in the rules (a rule naming them, the node annotation):
    only a NodePartitioning entry the admin marked `pinned: true` changes those; the controller's entries
    for them are ignored (a problem in the status). `sources`: who set each default (rules.SOURCES)."""
    gpus = list(gpus)
    out = Desired(
        dict(default), sources={g.index: (sources or {}).get(g.index, SOURCE_DEFAULT) for g in gpus}
    )
    if np is None:
        return out
    by_index = {g.index: g for g in gpus}
    by_uuid = {g.uuid: g for g in gpus}
    for i, entry in enumerate(np.spec.gpus):
        gpu = by_index.get(entry.index) if entry.index is not None else by_uuid.get(entry.uuid or "")
        where = f"spec.gpus[{i}]"
        if gpu is None:
            out.problems.append(
                f"{where}: no GPU {entry.index if entry.index is not None else entry.uuid} on this node"
            )
            continue
        if gpu.index in pinned and not entry.pinned:
            out.problems.append(
                f"{where}: {gpu.name} is pinned to {default.get(gpu.index)} by the node's strategy rules; "
                "only an entry with pinned: true changes it"
            )
            continue
        if entry.strategy == names.STRATEGY_MIG and not gpu.mig_capable:
            out.problems.append(f"{where}: {gpu.name} ({gpu.product}) has no MIG support")
            continue
        unknown = [
            s.profile
            for s in entry.mig_layout or []
            if not any(p.name == s.profile for p in gpu.mig_profiles)
        ]
        if unknown:
            have = ", ".join(p.name for p in gpu.mig_profiles)
            out.problems.append(
                f"{where}.migLayout: {gpu.name} ({gpu.product}) has no MIG profile "
                f"{', '.join(unknown)} (it has {have})"
            )
            continue
        misplaced = [
            f"{s.profile}@{s.placement}"
            for s in entry.mig_layout or []
            if s.placement is not None
            and not any(
                pl.start == s.placement
                for p in gpu.mig_profiles
                if p.name == s.profile
                for pl in p.placements
            )
        ]
        if misplaced:
            out.problems.append(
                f"{where}.migLayout: {gpu.name} ({gpu.product}) has no placement {', '.join(misplaced)}"
            )
            continue
        placed = [(s.profile, s.placement) for s in entry.mig_layout or [] if s.placement is not None]
        overlaps = _overlapping(gpu, placed)
        if overlaps:
            out.problems.append(f"{where}.migLayout: placements overlap: {'; '.join(overlaps)}")
            continue
        out.strategies[gpu.index] = entry.strategy
        out.sources[gpu.index] = SOURCE_PINNED if entry.pinned else SOURCE_CONTROLLER
        if entry.mig_layout:
            out.layouts[gpu.index] = tuple((s.profile, s.placement) for s in entry.mig_layout)
    return out


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mig_mode(mode: ModeLike, gpu: Gpu | None) -> str:
    if gpu is not None and not gpu.mig_capable:
        return "NotSupported"
    if mode.pending == NEEDS_RESET:
        return "ResetRequired"
    return "Enabled" if mode.mig_enabled else "Disabled"


def status_of(
    modes: dict[int, ModeLike],
    gpus: Iterable[Gpu],
    generation: int,
    problems: list[str],
    previous: dict[str, Any] | None = None,
    waits: dict[int, str] | None = None,
    sources: dict[int, str] | None = None,
) -> dict[str, Any]:
    """The NodePartitioning status for these decisions. A condition keeps its lastTransitionTime while its
    status does not change (from `previous`, the status last written). `waits`: GPUs whose new migLayout
    waits (layouts_now), pending like a strategy that waits. `sources`: who set each GPU's strategy
    (rules.SOURCES); a GPU that fell back at run time (MIG mode refused) is `fallback` whatever it says."""
    by_index = {g.index: g for g in gpus}
    entries = []
    for index, mode in sorted(modes.items()):
        entry: dict[str, Any] = {
            "index": index,
            "uuid": mode.uuid,
            "migMode": _mig_mode(mode, by_index.get(index)),
        }
        source = SOURCE_FALLBACK if getattr(mode, "fallback", "") else (sources or {}).get(index)
        if source:
            entry["source"] = source
        if mode.applied is not None:
            entry["strategy"] = mode.applied
        if mode.applied != mode.effective:
            entry["pending"] = mode.pending or "not published yet"
        elif (waits or {}).get(index):
            entry["pending"] = (waits or {})[index]
        entries.append(entry)
    waiting = [e for e in entries if e.get("pending")]
    applied = not waiting
    resets = [e for e in entries if e["migMode"] == "ResetRequired"]
    fallbacks = [
        f"GPU {i}: {m.desired} runs as {m.effective} (a feature gate of the API server is off)"
        for i, m in sorted(modes.items())
        if m.effective != m.desired and not getattr(m, "fallback", "")
    ]
    degraded = problems + [f"GPU {e['index']}: MIG mode change needs a GPU reset" for e in resets] + fallbacks
    old = {c["type"]: c for c in (previous or {}).get("conditions") or []}

    def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        status = "True" if ok else "False"
        since = old[kind]["lastTransitionTime"] if old.get(kind, {}).get("status") == status else _now()
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
            "observedGeneration": generation,
        }

    return {
        "observedGeneration": generation,
        "gpus": entries,
        "conditions": [
            condition(
                "Applied",
                applied,
                "AsDesired" if applied else "WaitingForGPUs",
                "; ".join(f"GPU {e['index']}: {e['pending']}" for e in waiting),
            ),
            condition(
                "Degraded",
                bool(degraded),
                "InvalidSpec"
                if problems
                else ("ResetRequired" if resets else ("FeatureGateOff" if fallbacks else "AsDesired")),
                "; ".join(degraded),
            ),
        ],
    }
