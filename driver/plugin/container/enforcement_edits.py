"""Container edits of the memory-enforcement backends: the driver partition's hooks and MPS's client setup.

Driver partition (docs/enforcement.md): a createRuntime hook, `carve-cdi-hook memory-limits`, runs in the
runtime's namespaces once the container's process exists, resolves its cgroup v2 directory from the OCI
state's pid and sets soft/hard limits on each GPU through the driver's NVML; it fails closed. A poststop
hook with `--clear` zeroes the soft limit of the recorded cgroup if it is still there. Both record under
the claim's plugin-owned directory (<claim dir>/cgroups/<container id>).

MPS: the claim's containers get the GPU's MPS pipe directory (the plugin's control daemon, driver/plugin/
mps) read-only (only the daemon writes there: docs/security.md, "MPS"), the daemons' /dev/shm where
--mps-shm-dir names it, and the client settings:
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from the share's cores and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from its
memory (the hard limit). MPS serves one uid per GPU at a time, and a container's uid is known only when the
runtime creates it: a createRuntime hook, `carve-cdi-hook mps-user`, refuses to start a container while the
GPU is leased to another uid or its server serves another uid's clients (the kubelet retries it), instead
of letting it hang in cuInit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from driver import names
from driver.cdi.spec import ContainerEdits, Hook, Mount

CGROUPS_DIR = "cgroups"  # under the claim's directory: the cgroups the hook set limits on, per container
FAKE_ENV_PREFIX = "CARVE_FAKE_"


@dataclass(frozen=True)
class DriverPartition:
    gpu_uuid: str
    soft: int
    hard: int


@dataclass(frozen=True)
class PartitionHost:
    """Host knowledge the hook needs: where carve-cdi-hook is, the driver's NVML, the cgroup v2 mount."""

    hook: Path  # carve-cdi-hook as the host names it
    nvml: str  # libnvidia-ml.so.1 as the host names it
    cgroup_root: str  # the node's cgroup v2 mount ("/sys/fs/cgroup", hybrid: "/sys/fs/cgroup/unified")
    fake: bool = False  # fake GPUs: the hook gets the fakes' CARVE_FAKE_* environment


def partition_edits(
    host: PartitionHost, record_dir: Path, parts: Sequence[DriverPartition]
) -> ContainerEdits:
    """The createRuntime hook that sets the limits and the poststop hook that clears the soft limit."""
    if not parts:
        return ContainerEdits()
    limits = [a for p in parts for a in ("--limit", f"{p.gpu_uuid}:{p.soft}:{p.hard}")]
    common = (
        names.HOOK_BINARY,
        "memory-limits",
        "--nvml",
        host.nvml,
        "--record",
        str(record_dir),
        "--cgroup-root",
        host.cgroup_root,
    )
    env = (
        tuple(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(FAKE_ENV_PREFIX))
        if host.fake
        else ()
    )
    return ContainerEdits(
        hooks=(
            Hook(str(host.hook), (*common, *limits), hook_name="createRuntime", env=env),
            Hook(str(host.hook), (*common, "--clear", *limits), hook_name="poststop", env=env),
        )
    )


@dataclass(frozen=True)
class MpsUserCheck:
    """What `carve-cdi-hook mps-user` needs from the host: itself and the driver's MPS control binary."""

    hook: Path  # carve-cdi-hook as the host names it
    control: str  # nvidia-cuda-mps-control as the host names it


@dataclass(frozen=True)
class MpsShare:
    pipe_dir: Path  # the GPU's MPS pipe directory on the host (its control daemon's)
    ordinal: int  # the GPU's CUDA ordinal in the container (PCI order, as the limiter's)
    cores: int  # percent of SMs (0: the whole GPU)
    memory: int  # bytes: the pinned device memory limit (the share's hard limit)
    shm_dir: Path | None = None  # the daemons' /dev/shm on the host (--mps-shm-dir); None: not shared
    gpu_uuid: str = ""
    state_dir: Path | None = None  # <plugin-dir>/mps/<gpu>: the daemon record and the uid lease (no tenant's)


def mps_edits(share: MpsShare, user_check: MpsUserCheck | None = None) -> ContainerEdits:
    """Mount the daemon's pipe directory (and its /dev/shm), set the client's limits and, with
    `user_check`, refuse the container while the GPU's server serves another uid."""
    pct = share.cores if 0 < share.cores < 100 else 100
    mib = max(1, share.memory // (1024 * 1024))
    # An MPS server maps its clients' memory through /dev/shm: a client in another container reaches it
    # only when its /dev/shm is the daemon's (the runtime's own /dev/shm mount is replaced by this one).
    shm = (
        (Mount(str(share.shm_dir), names.MPS_CONTAINER_SHM_DIR, ("rw", "nosuid", "nodev", "bind")),)
        if share.shm_dir is not None
        else ()
    )
    return ContainerEdits(
        env=(
            f"CUDA_MPS_PIPE_DIRECTORY={names.MPS_CONTAINER_PIPE_DIR}",
            f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={pct}",
            f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={share.ordinal}={mib}M",
        ),
        mounts=(
            Mount(
                str(share.pipe_dir),
                names.MPS_CONTAINER_PIPE_DIR,
                ("ro", "nosuid", "nodev", "noexec", "bind"),
            ),
            *shm,
        ),
        hooks=(
            (
                Hook(
                    str(user_check.hook),
                    (
                        names.HOOK_BINARY,
                        "mps-user",
                        "--control",
                        user_check.control,
                        "--pipe-dir",
                        str(share.pipe_dir),
                        "--gpu",
                        share.gpu_uuid,
                        *(("--state-dir", str(share.state_dir)) if share.state_dir is not None else ()),
                    ),
                    hook_name="createRuntime",
                ),
            )
            if user_check is not None and share.gpu_uuid
            else ()
        ),
    )


def _first(root: Path, candidates: Sequence[str]) -> Path | None:
    for c in candidates:
        if (root / c).is_file():
            return root / c
    return None


def nvml_host_path(layout, fake_dir: Path | None) -> str | None:
    """The driver's libnvidia-ml.so.1 as the host names it (the hook dlopen()s it); with fake GPUs the fake
    library (`fake_dir`) when the driver root has none. None when neither exists."""
    files = layout.driver_files()
    for f in files.libraries if files else ():
        if Path(f.path).name.startswith("libnvidia-ml.so."):
            return layout.host_path(layout.driver_root / f.real)
    if fake_dir is not None and (fake_dir / "libnvidia-ml.so.1").is_file():
        return str(fake_dir / "libnvidia-ml.so.1")
    return None


MPS_CONTROL_DIRS = ("usr/bin", "bin", "usr/local/nvidia/bin", "usr/local/bin")


def mps_control_path(driver_root: Path, fake_dir: Path | None) -> Path | None:
    """nvidia-cuda-mps-control: with fake GPUs (`fake_dir`) the fake one (a fake node's driver root holds
    stubs), else the driver root's (as the plugin sees it)."""
    if fake_dir is not None and (found := _first(fake_dir, [names.MPS_CONTROL_BINARY])):
        return found
    return _first(Path(driver_root), [f"{d}/{names.MPS_CONTROL_BINARY}" for d in MPS_CONTROL_DIRS])
