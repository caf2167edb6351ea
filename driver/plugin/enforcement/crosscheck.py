"""The cross-check's rule, pure: what NVML sees on each GPU against what the claims' records allow.

`cross_check` takes the claims (`ClaimView`: from the checkpoint, the limits files and the regions' slots)
and NVML's processes and SM utilization per GPU, and returns the `Findings` of one pass: processes no region
knows, claims whose processes use more memory than their quota allows (`allowed_bytes`), and each claim's
compute sample. `over_share` judges a claim's recent samples against its effective share and core policy.
The I/O around it (NVML, /proc, Events, kills) is driver/plugin/enforcement/enforcer.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

MIB = 1 << 20
CONTEXT_ALLOWANCE_BYTES = (
    512 * MIB
)  # per process: a CUDA context's memory, which NVML counts and carve does not
MARGIN_FRACTION = 20  # plus 1/20 (5%) of the quota
# The compute check. The limiter holds a share on average over its 100 ms ticks (a kernel longer than a tick
# overshoots, NVML samples are coarse): a claim counts as over its share only when NVML shows it more than
# CORE_MARGIN percentage points above it in each of CORE_WINDOW passes in a row (2 s apart by default).
CORE_MARGIN = 10
CORE_WINDOW = 3
NEIGHBOUR_BUSY = 5  # percent of SM time by other processes that makes a neighbour busy (the limiter's rule)
POLICY_DEFAULT, POLICY_FORCE, POLICY_DISABLE = "default", "force", "disable"


@dataclass(frozen=True)
class GpuProcess:
    pid: int  # host pid, as NVML reports it
    used_bytes: int  # NVML's usedGpuMemory (0 when NVML cannot tell)


@dataclass(frozen=True)
class ClaimView:
    """One limited claim, from the plugin's records (checkpoint, limits file) and its region's slots."""

    uid: str
    namespace: str
    name: str
    gpus: tuple[str, ...]  # GPU UUID per device (checkpoint)
    memory_limits: tuple[int, ...]  # bytes per device (limits file); 0 = none
    pids: frozenset[int]  # host pids of the processes its region knows
    unresolved: bool = False  # a process of its region has no known host pid yet: its GPUs are not judged
    core_shares: tuple[int, ...] = ()  # effective SM percent per device (limits file); 0 = no compute limit
    core_policy: str = POLICY_DEFAULT  # limits file


@dataclass(frozen=True)
class Unenforced:
    gpu_uuid: str
    pid: int
    used_bytes: int
    claim_uid: str | None  # the claim whose container runs it, when the process's environment tells


@dataclass(frozen=True)
class OverQuota:
    claim_uid: str
    gpu_uuid: str
    used_bytes: int
    limit_bytes: int
    pids: tuple[int, ...]


@dataclass(frozen=True)
class CoreSample:
    """One pass's NVML SM utilization (percent of the GPU) on one GPU: a claim's processes and the others."""

    used: int  # summed over the claim's processes
    others: int  # summed over every other process on the GPU (other claims', unenforced ones)
    pids: tuple[int, ...] = ()  # the claim's processes on the GPU


@dataclass(frozen=True)
class OverShare:
    claim_uid: str
    gpu_uuid: str
    used_percent: int  # the claim's SM utilization, mean over the window
    share_percent: int  # its effective share
    policy: str
    pids: tuple[int, ...]


@dataclass
class Findings:
    unenforced: list[Unenforced] = field(default_factory=list)
    over_quota: list[OverQuota] = field(default_factory=list)
    over_share: list[OverShare] = field(default_factory=list)
    soft_gpus: tuple[str, ...] = ()  # the GPUs checked
    kills: int = 0  # processes killed since the plugin started
    # this pass's compute samples, (claim uid, GPU) -> sample, for claims with a compute limit on that GPU
    core_samples: dict[tuple[str, str], CoreSample] = field(default_factory=dict)


def allowed_bytes(limit: int, processes: int, allowance: int = CONTEXT_ALLOWANCE_BYTES) -> int:
    """What NVML may show for a claim's processes on a GPU before the claim counts as over its quota."""
    return limit + limit // MARGIN_FRACTION + processes * allowance


def unpermitted_excess(sample: CoreSample, share: int, policy: str, margin: int = CORE_MARGIN) -> int:
    """Percentage points a sample shows a claim above its share that its policy did not permit (0: none).

    `force` never permits more than the share; `default` permits it while no other process is busy on the
    GPU (the limiter then does not throttle: bursting on an idle GPU is the policy); `disable` and a claim
    without a compute limit (share 0) are never over. The margin absorbs the limiter's per-tick overshoot.
    """
    if share <= 0 or policy == POLICY_DISABLE or sample.used <= share + margin:
        return 0
    if policy != POLICY_FORCE and sample.others < NEIGHBOUR_BUSY:
        return 0
    return sample.used - share


def over_share(
    samples: Sequence[CoreSample],
    share: int,
    policy: str,
    window: int = CORE_WINDOW,
    margin: int = CORE_MARGIN,
) -> int | None:
    """The pure compute rule over a claim's recent samples on one GPU (oldest first): its mean SM utilization
    over the last `window` samples when every one of them is an unpermitted excess, else None. Sustained
    means sustained: a short spike, or one pass where bursting was allowed, is not enough."""
    recent = list(samples)[-window:]
    if len(recent) < window or not all(unpermitted_excess(s, share, policy, margin) for s in recent):
        return None
    return round(sum(s.used for s in recent) / len(recent))


def cross_check(
    claims: Iterable[ClaimView],
    processes: Mapping[str, list[GpuProcess]],
    owner: Callable[[int], str | None] = lambda _pid: None,
    allowance: int = CONTEXT_ALLOWANCE_BYTES,
    utilization: Mapping[str, Mapping[int, int]] | None = None,
) -> Findings:
    """The pure rule: `processes` are NVML's compute processes per GPU UUID; `owner` maps a pid to a claim;
    `utilization` is NVML's SM percent per pid per GPU (None: not asked, no compute samples)."""
    claims = list(claims)
    known: dict[str, set[int]] = {}
    for c in claims:
        for gpu in c.gpus:
            if gpu:
                known.setdefault(gpu, set()).update(c.pids)
    found = Findings(soft_gpus=tuple(sorted(known)))
    # a process whose host pid is not known yet would look unknown to NVML's pid: judge its GPUs next pass
    pending = {gpu for c in claims if c.unresolved for gpu in c.gpus}
    for gpu in found.soft_gpus:
        if gpu in pending:
            continue
        for p in processes.get(gpu, []):
            if p.pid not in known[gpu]:
                found.unenforced.append(Unenforced(gpu, p.pid, p.used_bytes, owner(p.pid)))
    for c in claims:
        for gpu, limit in zip(c.gpus, c.memory_limits, strict=False):
            mine = [p for p in processes.get(gpu, []) if p.pid in c.pids]
            used = sum(p.used_bytes for p in mine)
            if limit and mine and used > allowed_bytes(limit, len(mine), allowance):
                found.over_quota.append(
                    OverQuota(c.uid, gpu, used, limit, tuple(sorted(p.pid for p in mine)))
                )
    for c in claims if utilization is not None else ():
        for gpu, share in zip(c.gpus, c.core_shares, strict=False):
            if not gpu or share <= 0 or gpu not in utilization:
                continue
            util = utilization[gpu]
            mine_util = {pid: pct for pid, pct in util.items() if pid in c.pids}
            found.core_samples[(c.uid, gpu)] = CoreSample(
                sum(mine_util.values()),
                sum(pct for pid, pct in util.items() if pid not in c.pids),
                tuple(sorted(mine_util)),
            )
    return found
