"""Container edits that depend on the host: device nodes, driver files, and the limiter's mounts.

The host is read once at startup (`HostLayout.scan`): which device nodes exist and which driver libraries
and binaries are under `--driver-root`. Only what exists is put into a CDI spec, because a runtime fails
the container when a CDI device node or mount source is missing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from driver import names
from driver.cdi.spec import ContainerEdits, DeviceNode, Mount
from driver.limits import ClaimLimits, limiter_env

# Where driver files are looked for under the driver root (same lists as the NVIDIA driver installers).
LIBRARY_DIRS = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib",
)
BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "opt/bin")
LIBRARIES = (
    "libcuda.so.1",
    "libnvidia-ml.so.1",
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so.4",
    "libcudadebugger.so.1",
    "libnvidia-gpucomp.so",
)
BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
COMMON_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
LIMITER_PRELOAD_PATH = "/etc/ld.so.preload"
# Each claim's files are mounted under /var/run/carve/<claim-uid>, so two soft claims in one container never
# mount onto the same path (see docs/plugin.md, "Several soft claims in one container"): the region file
# read-write (usage accounting only) and the limits directory read-only (what the limiter enforces).
REGION_CONTAINER_DIR = "/var/run/carve"
REGION_FILE = "region"
LIMITS_DIR = "limits"
LIMITS_FILE = "limits"
# The limiter indexes limits by CUDA ordinal; PCI order is the one the plugin can predict (claim_limits).
DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER=PCI_BUS_ID"


def region_container_path(claim_uid: str) -> str:
    """CARVE_REGION for a claim: its region file as the claim's containers see it."""
    return f"{REGION_CONTAINER_DIR}/{claim_uid}/{REGION_FILE}"


@dataclass(frozen=True)
class HostLayout:
    """The driver files and device nodes as the plugin sees them, and the host paths the runtime needs.

    The plugin may see the driver root at another path than the host does (in the DaemonSet the host's
    driver is mounted under /host, or the GPU Operator's /run/nvidia/driver at /driver-root). It reads
    under `driver_root` and writes CDI host paths under `host_driver_root`, the same directory on the host.
    """

    driver_root: Path
    dev_root: Path  # where /dev/nvidia* are: <driver-root>/dev when it exists, else /dev
    proc_root: Path  # /proc/driver/nvidia/capabilities lives under it (MIG capability minors)
    driver_files: tuple[Mount, ...] = field(default=())
    common_nodes: tuple[DeviceNode, ...] = field(default=())
    host_driver_root: Path | None = None  # None: the host sees the driver root where the plugin does

    @classmethod
    def scan(
        cls, driver_root: Path, proc_root: Path = Path("/proc"), host_driver_root: Path | None = None
    ) -> HostLayout:
        driver_root = Path(driver_root)
        dev_root = driver_root / "dev" if (driver_root / "dev").is_dir() else Path("/dev")
        layout = cls(driver_root, dev_root, Path(proc_root), host_driver_root=host_driver_root)
        files = tuple(
            Mount(host_path=layout.host_path(m.host_path), container_path=m.container_path, options=m.options)
            for m in _find_files(driver_root, LIBRARY_DIRS, LIBRARIES)
            + _find_files(driver_root, BINARY_DIRS, BINARIES)
        )
        nodes = tuple(n for n in (layout._node(f"/dev/{name}") for name in COMMON_NODES) if n)
        return cls(driver_root, dev_root, Path(proc_root), files, nodes, host_driver_root)

    def host_path(self, seen: str | Path) -> str:
        """A path the plugin sees under the driver root, as the host (and so the CDI runtime) sees it."""
        seen = Path(seen)
        if self.host_driver_root is None or not seen.is_relative_to(self.driver_root):
            return str(seen)
        return str(self.host_driver_root / seen.relative_to(self.driver_root))

    def _node(self, container_path: str) -> DeviceNode | None:
        host = self.dev_root / container_path.removeprefix("/dev/")
        if not os.path.exists(host):
            return None
        return DeviceNode(path=container_path, host_path=self.host_path(host))

    def gpu_nodes(self, minor: int) -> tuple[DeviceNode, ...]:
        node = self._node(f"/dev/nvidia{minor}")
        return (node,) if node else ()

    def mig_nodes(self, minor: int, gpu_instance_id: int | None, compute_instance_id: int | None) -> tuple:
        """The parent GPU's node plus the capability nodes of one MIG GPU and compute instance.

        The minors of /dev/nvidia-caps/nvidia-cap<N> are published by the kernel driver in
        /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access ("DeviceFileMinor: N").
        """
        nodes = list(self.gpu_nodes(minor))
        if gpu_instance_id is None:
            return tuple(nodes)
        base = self.proc_root / "driver/nvidia/capabilities" / f"gpu{minor}" / "mig" / f"gi{gpu_instance_id}"
        for access in (base / "access", base / f"ci{compute_instance_id}" / "access"):
            cap = _cap_minor(access)
            if cap is not None:
                node = self._node(f"/dev/nvidia-caps/nvidia-cap{cap}")
                if node:
                    nodes.append(node)
        return tuple(nodes)

    def base_edits(self) -> ContainerEdits:
        """What every claim's containers get: common nodes, driver files, and no legacy runtime hook."""
        return ContainerEdits(
            env=("NVIDIA_VISIBLE_DEVICES=void",),
            device_nodes=self.common_nodes,
            mounts=self.driver_files,
        )


def _cap_minor(access: Path) -> int | None:
    try:
        for line in access.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "DeviceFileMinor":
                return int(value.strip())
    except (OSError, ValueError):
        return None
    return None


def _resolve_within(root: Path, path: Path) -> Path | None:
    """Follow symlinks as the host would, with `root` as "/": an absolute link target is under the root.

    Path.resolve() would follow an absolute target (libcuda.so.1 -> /usr/lib64/libcuda.so.580.95.05) in
    the plugin's own filesystem, which is not the driver's when the driver root is mounted elsewhere.
    """
    for _ in range(40):  # the kernel's own limit on nested links
        if not path.is_symlink():
            return path if path.exists() else None
        target = Path(os.readlink(path))
        path = root / target.relative_to("/") if target.is_absolute() else path.parent / target
        path = Path(os.path.normpath(path))
    return None


def _find_files(root: Path, dirs: tuple[str, ...], wanted: tuple[str, ...]) -> list[Mount]:
    found: list[Mount] = []
    for name in wanted:
        for d in dirs:
            # Bind the real file: a symlink would be resolved inside the container, not on the host.
            real = _resolve_within(root, root / d / name)
            if real is not None:
                found.append(Mount(host_path=str(real), container_path=f"/{d}/{name}"))
                break
    return found


@dataclass(frozen=True)
class ClaimFiles:
    """The per-claim directory <plugin-dir>/claims/<uid> (0700): ld.so.preload, the shared region (the one
    file a container may write, fixed-size) and the plugin-owned limits directory (read-only to containers).
    """

    root: Path

    @property
    def preload(self) -> Path:
        return self.root / "ld.so.preload"

    @property
    def region_dir(self) -> Path:
        return self.root / "region"

    @property
    def region(self) -> Path:
        return self.region_dir / REGION_FILE

    @property
    def limits_dir(self) -> Path:
        return self.root / LIMITS_DIR

    @property
    def limits(self) -> Path:
        return self.limits_dir / LIMITS_FILE


def limiter_edits(files: ClaimFiles, limiter_dir: Path, limits: ClaimLimits) -> ContainerEdits:
    """Mounts and env that put the claim's processes under the limiter.

    The region file goes where `limits.region_path` says (region_container_path of the claim), read-write:
    only the file, so a container gets no writable host directory and cannot delete or replace it (a mount
    point). The limits directory goes next to it, read-only: the limiter reads <region dir>/limits/limits.
    A directory, not the file, so the plugin's atomic rewrites (a new inode) reach running containers.
    """
    env = limiter_env(limits)
    claim_dir = Path(limits.region_path).parent
    return ContainerEdits(
        env=(*(f"{k}={v}" for k, v in sorted(env.items())), DEVICE_ORDER_ENV),
        mounts=(
            Mount(str(Path(limiter_dir) / names.LIMITER_LIBRARY), names.LIMITER_CONTAINER_PATH),
            Mount(str(files.preload), LIMITER_PRELOAD_PATH),
            Mount(str(files.region), limits.region_path, ("rw", "nosuid", "nodev", "noexec", "bind")),
            Mount(
                str(files.limits_dir),
                str(claim_dir / LIMITS_DIR),
                ("ro", "nosuid", "nodev", "noexec", "bind"),
            ),
        ),
    )
