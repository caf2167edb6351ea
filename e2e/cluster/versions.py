"""What differs between the Kubernetes minors the e2e runs: the pinned patch version (from the minor's
go.mod), whether the minor has DRA at all, the DRA feature gates and API groups the components need, and
kubelet settings a minor adds or lacks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CLUSTER_DIR = Path(__file__).resolve().parent
REPO = CLUSTER_DIR.parents[1]

# The minor `make e2e`, the launcher, pytest e2e and CI use unless told otherwise: the current release.
DEFAULT_MINOR = "1.37"

# Alpha in 1.34/1.35 (fields are dropped with the gate off), beta and on by default in 1.36
# (docs/install.md, "Feature gates per Kubernetes version").
ALPHA_DRA_GATES = (
    "DRAConsumableCapacity",
    "DRAPartitionableDevices",
    "DRADeviceTaints",
    "DRAExtendedResource",
)

# Gates a minor locks to their (on) default: `--feature-gates=<gate>=false` makes every component refuse
# to start ("cannot set feature gate ... to false, feature is locked to true"), so `GATES=off` leaves them
# on. From k8s.io/kubernetes pkg/features/kube_features.go at each tag (LockToDefault: true):
# v1.37.2: DRAExtendedResource GA and locked (DRADeviceTaints GA but not locked: it can still be off);
# v1.38.0-beta.0: DRAPartitionableDevices and DRADeviceTaints GA and locked as well (DRAConsumableCapacity
# GA, not locked).
LOCKED_ON: dict[int, frozenset[str]] = {
    37: frozenset({"DRAExtendedResource"}),
    38: frozenset({"DRAExtendedResource", "DRAPartitionableDevices", "DRADeviceTaints"}),
}

# Gates on by default that depend on one GATES=off turns off: they go off with it, or the components refuse
# to start ("DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]",
# found by the 1.37 gates-off e2e). From the dependency table of kube_features.go at v1.37.2:
# DRADeviceTaintRules (GA, on) needs DRADeviceTaints; DRAFractionalCapacityRange (beta) needs
# DRAConsumableCapacity. The newest known minor's table holds for a newer one.
DEPENDENTS: dict[int, dict[str, tuple[str, ...]]] = {
    37: {
        "DRADeviceTaints": ("DRADeviceTaintRules",),
        "DRAConsumableCapacity": ("DRAFractionalCapacityRange",),
    },
}

# What `GATES=off` must turn off for the e2e's gates-off expectations (the fallback: whole GPUs and slots,
# no soft, MIG or time-sliced devices).
GATES_OFF_NEEDS = ("DRAConsumableCapacity", "DRAPartitionableDevices")


@dataclass(frozen=True)
class Version:
    minor: str  # "1.36"
    patch: str  # "v1.36.3"
    gates_on: bool

    @property
    def minor_int(self) -> int:
        return int(self.minor.split(".")[1])

    @property
    def dra(self) -> bool:
        """resource.k8s.io/v1 (DRA GA) exists from 1.34; older minors (1.29: only v1alpha2, a different API)
        run the legacy shim alone (docs/e2e.md, "Kubernetes 1.29: the legacy shim alone")."""
        return self.minor_int >= 34

    @property
    def binary(self) -> Path:
        return REPO / ".tools" / "k8s" / self.patch / "k8s"

    @property
    def label(self) -> str:
        if not self.dra:
            return f"{self.patch} without DRA"
        return f"{self.patch} gates {'on' if self.gates_on else 'off'}"

    @property
    def locked_on(self) -> frozenset[str]:
        """DRA gates this minor locks on: they cannot be turned off (LOCKED_ON; the newest known minor's
        locks hold for a newer one)."""
        known = [m for m in LOCKED_ON if m <= self.minor_int]
        return LOCKED_ON[max(known)] if known else frozenset()

    def feature_gates(self) -> dict[str, bool]:
        """The same map for the API server, scheduler, controller manager and kubelets."""
        if not self.dra:
            return {}  # the alpha DRA gates' names do not exist yet; DynamicResourceAllocation is off
        if self.minor_int >= 36:
            # Beta or GA and on by default: gates on needs nothing; gates off turns off what is not locked.
            if self.gates_on:
                return {}
            off = [g for g in ALPHA_DRA_GATES if g not in self.locked_on]
            known = [m for m in DEPENDENTS if m <= self.minor_int]
            dependents = DEPENDENTS[max(known)] if known else {}
            off += [d for g in off for d in dependents.get(g, ()) if d not in self.locked_on]
            return dict.fromkeys(off, False)
        return dict.fromkeys(ALPHA_DRA_GATES, self.gates_on)

    def gates_flag(self) -> list[str]:
        gates = self.feature_gates()
        return (
            ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in gates.items())]
            if gates
            else []
        )

    def runtime_config(self) -> str:
        """--runtime-config of the API server ("" when the minor needs none)."""
        if not self.dra:
            return ""
        # DeviceTaintRule (device-taint-eviction controller) is served only as v1alpha3 before 1.36.
        groups = ["resource.k8s.io/v1beta1=true", "resource.k8s.io/v1beta2=true"]
        if self.minor_int < 36:
            groups.append("resource.k8s.io/v1alpha3=true")
        return ",".join(groups)

    @property
    def capacity_check_bug(self) -> str:
        """Why this version's scheduler mis-checks consumable capacity, or "" (docs/e2e.md, "Found").

        kubernetes/kubernetes#133705, fixed in 1.35 by #133706 and in no 1.34 patch (k8s.io/dynamic-resource-
        allocation v0.34.10 still has it): with DRAConsumableCapacity on, the 1.34 scheduler checks a
        request's capacity, and the capacity already consumed, against the slice's device at the request's
        device index (`r.deviceIndex`: the slice's first device for a one-device request), not against the
        device it allocates."""
        if self.minor_int == 34 and self.gates_on:
            return (
                "Kubernetes 1.34 scheduler bug kubernetes/kubernetes#133705 (fixed in 1.35): consumable "
                "capacity is checked against the slice's first device, not the allocated one"
            )
        return ""

    def kubelet_extra(self, pod_logs_dir: Path) -> dict[str, object]:
        """KubeletConfiguration fields some minors lack: 1.29 has no podLogsDir (its kubelet writes pod logs
        under /var/log/pods); from 1.35 the kubelet refuses cgroup v1 unless told otherwise (KEP-5573), and
        1.34 and older lack that field (1.29 runs on cgroup v1 as is)."""
        extra: dict[str, object] = {}
        if self.minor_int >= 34:
            extra["podLogsDir"] = str(pod_logs_dir)
        if self.minor_int >= 35:
            extra["failCgroupV1"] = False
        return extra


def minors() -> list[str]:
    return sorted((p.name for p in CLUSTER_DIR.iterdir() if re.fullmatch(r"1\.\d+", p.name)), reverse=True)


def resolve(minor: str, gates: str = "on") -> Version:
    gomod = CLUSTER_DIR / minor / "go.mod"
    if not gomod.exists():
        raise ValueError(f"no e2e/cluster/{minor}/go.mod: known minors are {', '.join(minors())}")
    match = re.search(r"^\s*k8s\.io/kubernetes (v\S+)$", gomod.read_text(), re.M)
    if not match:
        raise ValueError(f"{gomod}: no k8s.io/kubernetes requirement")
    if gates not in ("on", "off"):
        raise ValueError(f"gates must be 'on' or 'off', not {gates!r}")
    version = Version(minor, match.group(1), gates == "on")
    locked = sorted(set(GATES_OFF_NEEDS) & version.locked_on)
    if not version.gates_on and locked:
        raise ValueError(
            f"Kubernetes {version.patch} locks {', '.join(locked)} on: GATES=off (the fallback without "
            f"consumable capacity and counters) cannot be run on it; use a minor up to 1.37 for that"
        )
    return version
