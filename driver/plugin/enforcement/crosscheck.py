"""The cross-check's rule, pure: what NVML sees on each GPU against what the claims' records allow.

`attribute` gives each claim the host pids NVML reports on its GPUs whose cgroup names one of the claim's
pods (enforcement/attribution.py); the pids and namespaces a container writes into its region are never used.
`cross_check` takes the claims (`ClaimView`: from the checkpoint, the limits files, the pods the claims are
reserved for) and NVML's processes and SM utilization per GPU, and returns the `Findings` of one pass:
processes on a soft-sliced GPU that belong to no claim of that GPU, claims whose processes use more memory
than their quota allows (`allowed_bytes`: a process in the claim's pod that escapes the limiter counts too),
claims whose region reports processes the node cannot find on their GPUs, and each claim's compute sample.
`over_share` judges a claim's recent samples against its effective share and core policy.
The I/O around it (NVML, /proc, Events, kills) is driver/plugin/enforcement/enforcer.py.
"""

from __future__ import annotations

import dataclasses
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
    """One limited claim, from the plugin's records (checkpoint, limits file, the claim's reservedFor)."""

    uid: str
    namespace: str
    name: str
    gpus: tuple[str, ...]  # GPU UUID per device (checkpoint)
    memory_limits: tuple[int, ...]  # bytes per device (limits file); 0 = none
    pids: frozenset[int] = frozenset()  # host pids NVML reports on its GPUs whose cgroup is one of its pods
    core_shares: tuple[int, ...] = ()  # effective SM percent per device (limits file); 0 = no compute limit
    core_policy: str = POLICY_DEFAULT  # limits file
    pods: frozenset[str] = frozenset()  # UIDs of the pods the claim is reserved for (API server, checkpoint)
    reported_processes: int = 0  # live process slots in its region: a usage report, never an identity


@dataclass(frozen=True)
class Unenforced:
    gpu_uuid: str
    pid: int
    used_bytes: int
    claim_uid: str | None  # a claim of the process's pod (by its cgroup) on another GPU, if it has one
    pod_uid: str | None = None  # the pod its cgroup names (None: not a pod's process, or unreadable)


@dataclass(frozen=True)
class OverQuota:
    claim_uid: str
    gpu_uuid: str
    used_bytes: int
    limit_bytes: int
    pids: tuple[int, ...]
    pods: tuple[str, ...] = ()  # the pods whose processes these are: a kill may hit only them


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
    pods: tuple[str, ...] = ()  # the claim's pods: a kill may hit only their processes


@dataclass
class Findings:
    unenforced: list[Unenforced] = field(default_factory=list)
    over_quota: list[OverQuota] = field(default_factory=list)
    over_share: list[OverShare] = field(default_factory=list)
    # claims whose region reports live processes while NVML shows none of their pods' processes on their
    # GPUs (a forged or stale region, or a process whose pod the node does not know yet)
    unattributed: list[str] = field(default_factory=list)
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


def attribute(
    claims: Iterable[ClaimView],
    processes: Mapping[str, list[GpuProcess]],
    pod_of: Mapping[int, str | None],
) -> list[ClaimView]:
    """Each claim with the host pids NVML reports on its GPUs whose pod (`pod_of`: pid -> pod UID, from the
    process's cgroup) is one the claim is reserved for."""
    out = []
    for c in claims:
        pids = {
            p.pid
            for gpu in set(c.gpus)
            for p in processes.get(gpu, [])
            if gpu and pod_of.get(p.pid) is not None and pod_of.get(p.pid) in c.pods
        }
        out.append(dataclasses.replace(c, pids=frozenset(pids)))
    return out


def cross_check(
    claims: Iterable[ClaimView],
    processes: Mapping[str, list[GpuProcess]],
    owner: Callable[[int], str | None] = lambda _pid: None,
    allowance: int = CONTEXT_ALLOWANCE_BYTES,
    utilization: Mapping[str, Mapping[int, int]] | None = None,
    pod_of: Mapping[int, str | None] | None = None,
) -> Findings:
    """The pure rule: `processes` are NVML's compute processes per GPU UUID; each claim's `pids` are the ones
    `attribute` gave it; `owner` names a claim to tell about a process no claim of its GPU holds;
    `utilization` is NVML's SM percent per pid per GPU (None: not asked, no compute samples)."""
    claims = list(claims)
    known: dict[str, set[int]] = {}
    for c in claims:
        for gpu in c.gpus:
            if gpu:
                known.setdefault(gpu, set()).update(c.pids)
    found = Findings(soft_gpus=tuple(sorted(known)))
    for gpu in found.soft_gpus:
        for p in processes.get(gpu, []):
            if p.pid not in known[gpu]:
                pod = (pod_of or {}).get(p.pid)
                found.unenforced.append(Unenforced(gpu, p.pid, p.used_bytes, owner(p.pid), pod))
    for c in claims:
        for gpu, limit in zip(c.gpus, c.memory_limits, strict=False):
            mine = [p for p in processes.get(gpu, []) if p.pid in c.pids]
            if not limit or not mine:
                continue
            # A pod holding several claims on one GPU: its processes count for each of them, so they are
            # judged against the claims' quotas together, and reported once (on the first claim).
            pids = {p.pid for p in mine}
            sharing = sorted(
                (d for d in claims if d.pids & pids and gpu in d.gpus), key=lambda d: d.uid
            )
            if sharing[0].uid != c.uid:
                continue
            limits = [
                lim for d in sharing for g, lim in zip(d.gpus, d.memory_limits, strict=False) if g == gpu
            ]
            if not all(limits):
                continue  # one of them has no memory limit there: the pod's processes are not limited
            group = [p for p in processes.get(gpu, []) if any(p.pid in d.pids for d in sharing)]
            used = sum(p.used_bytes for p in group)
            if used > allowed_bytes(sum(limits), len(group), allowance):
                pods = tuple(sorted(set().union(*(d.pods for d in sharing))))
                found.over_quota.append(
                    OverQuota(c.uid, gpu, used, sum(limits), tuple(sorted(p.pid for p in group)), pods)
                )
    for c in claims:
        on_gpus = any(p.pid in c.pids for gpu in c.gpus for p in processes.get(gpu, []))
        if c.reported_processes > 0 and not on_gpus and any(g in processes for g in c.gpus):
            found.unattributed.append(c.uid)
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
