"""The GPU inventory model: what carve knows about one physical GPU, as NVML reports it.

Plain frozen dataclasses, so the device model (driver/devices) can be tested by building them by hand.
Nothing here talks to NVML; driver/gpu/nvml.py fills these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class InventoryError(Exception):
    """GPUs cannot be discovered (no NVML, bad fake spec, NVML error); the message says what to do."""


@dataclass(frozen=True)
class MigPlacement:
    """A position of a GPU instance: `start` memory slice and `size` memory slices (NVML placement units)."""

    start: int
    size: int

    @property
    def slices(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile as NVML reports it (nvmlGpuInstanceProfileInfo_v2 + possible placements)."""

    id: int  # NVML profile id: what CreateGpuInstanceWithPlacement takes
    index: int  # NVML_GPU_INSTANCE_PROFILE_* index it was read under
    name: str  # e.g. "1g.10gb", "1g.10gb+me", "1g.20gb"
    compute_slices: int  # sliceCount
    memory_bytes: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int
    max_instances: int
    placements: tuple[MigPlacement, ...]

    @property
    def memory_slices(self) -> int:
        """Memory slices one instance occupies (all placements of a profile have the same size)."""
        return self.placements[0].size if self.placements else 0


@dataclass(frozen=True)
class MigInstance:
    """A live MIG device: a GPU instance and its (first) compute instance."""

    uuid: str  # MIG-... of the MIG device
    profile_id: int
    profile_name: str
    placement: MigPlacement
    gpu_instance_id: int
    compute_instance_id: int
    memory_bytes: int
    multiprocessors: int


@dataclass(frozen=True)
class Gpu:
    """One physical GPU."""

    uuid: str
    index: int
    minor: int
    product: str  # nvmlDeviceGetName, e.g. "NVIDIA A100-SXM4-80GB"
    memory_bytes: int
    multiprocessors: int
    architecture: str  # lower-case NVML architecture name: turing, ampere, ada, hopper, blackwell
    cuda_compute_capability: str  # "8.0"
    driver_version: str  # "580.95.05"
    cuda_driver_version: str  # "13.0"
    pci_bus_id: str  # "0000:3b:00.0" (domain:bus:device.function, lower case)
    mig_capable: bool = False
    mig_enabled: bool = False  # current MIG mode
    mig_profiles: tuple[MigProfile, ...] = field(default=())
    mig_instances: tuple[MigInstance, ...] = field(default=())
    # The pending MIG mode when it differs from the current one (a change waits for the GPU to be idle or
    # reset, nvmlDeviceGetMigMode's pendingMode), else None.
    mig_pending: bool | None = None
    # The driver can partition this GPU's memory per cgroup (nvmlDeviceSetMemoryLimits_v1 exists and does
    # not answer NOT_SUPPORTED; CUDA 13.4 generation drivers, never on MIG devices). docs/enforcement.md.
    memory_limits: bool = False
    # Host topology (driver/gpu/pcie.py): the PCIe root complex, "pci0000:3a", and the nearest NUMA node;
    # None when the host does not tell (the attribute is then left out).
    pcie_root: str | None = None
    numa_node: int | None = None

    @property
    def name(self) -> str:
        """carve's device name for the whole GPU."""
        return f"gpu-{self.minor}"

    @property
    def memory_slice_count(self) -> int:
        """Memory slices of the GPU (8 on A100/H100/H200/B200, 4 on A30), from the placements NVML reports."""
        ends = [p.start + p.size for prof in self.mig_profiles for p in prof.placements]
        return max(ends, default=0)

    def profile(self, name_or_id: str | int) -> MigProfile:
        for p in self.mig_profiles:
            if p.name == name_or_id or p.id == name_or_id:
                return p
        raise KeyError(f"{self.name} ({self.product}) has no MIG profile {name_or_id!r}")
