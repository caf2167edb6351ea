"""What a container needs from the host: the driver's device nodes, files and hooks, as CDI edits.

`HostLayout` reads the driver root as the plugin sees it (`--driver-root`) and writes host paths as the
host names them (`--host-driver-root`). Nothing is scanned once and trusted forever: device nodes are
checked at every prepare (/dev/nvidia-uvm may appear after the plugin started), and the driver's files
are scanned again whenever the installed driver version changes (the scan is cached per version).

With `driver_required` (real GPUs), a missing required node (/dev/nvidiactl, /dev/nvidia-uvm, the GPU's
/dev/nvidia<minor>) or driver library fails the claim with an error naming it, since a runtime would fail
the container anyway, later and less clearly. Without it (fake GPUs, no driver on the node) only what
exists is listed.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from driver import names
from driver.cdi.spec import ContainerEdits, DeviceNode, Hook, Mount
from driver.plugin.container.driverfiles import (
    LIBRARY_SEARCH_DIRS,
    DriverFiles,
    DriverFilesError,
    driver_version,
    scan_driver,
)
from driver.plugin.mig.caps import MigCapsError, mig_cap_nodes

# The toolkit's control nodes, in its order; the first two are optional (no display, no profiling).
CONTROL_NODES = ("nvidia-modeset", "nvidia-uvm-tools", "nvidia-uvm", "nvidiactl")
REQUIRED_CONTROL_NODES = ("nvidia-uvm", "nvidiactl")
LIBRARY_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_MOUNT_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
# The container toolkit's runtime hook, if installed as the default runtime, must add nothing of its own.
NO_LEGACY_RUNTIME_ENV = "NVIDIA_VISIBLE_DEVICES=void"
LIBCUDA_DIR_ENV = "NVIDIA_CTK_LIBCUDA_DIR"


_STAMPED = (*LIBRARY_SEARCH_DIRS, "etc/ld.so.cache")  # what a driver install or upgrade changes


@dataclass(frozen=True)
class HostLayout:
    """The driver files and device nodes as the plugin sees them, and the host paths the runtime needs.

    The plugin may see the driver root at another path than the host does (in the DaemonSet the host's
    driver is mounted under /host, or the GPU Operator's /run/nvidia/driver at its own path). It reads
    under `driver_root` and writes CDI host paths under `host_driver_root`, the same directory on the host.
    """

    driver_root: Path
    dev_root: Path  # where /dev/nvidia* are: <driver-root>/dev when it exists, else /dev
    proc_root: Path  # driver/nvidia/capabilities and devices (MIG capability nodes) live under it
    host_driver_root: Path | None = None  # None: the host sees the driver root where the plugin does
    hook_dir: Path | None = None  # host dir of carve-cdi-hook and carve-ldconfig (the limiter dir)
    driver_required: bool = True
    _scans: dict = field(default_factory=dict, compare=False, hash=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, hash=False, repr=False)
    # [(watched paths, their stamp, the driver version)]: _driver_version's cache
    _version: list = field(default_factory=list, compare=False, hash=False, repr=False)
    # driver_edits of the last scan: the same for every claim until the driver changes (a prepare's
    # largest pure cost otherwise: a mount per driver file, docs/reliability.md)
    _edits: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def scan(
        cls,
        driver_root: Path,
        proc_root: Path = Path("/proc"),
        host_driver_root: Path | None = None,
        *,
        hook_dir: Path | None = None,
        driver_required: bool = True,
    ) -> HostLayout:
        driver_root = Path(driver_root)
        dev_root = driver_root / "dev" if (driver_root / "dev").is_dir() else Path("/dev")
        return cls(
            driver_root,
            dev_root,
            Path(proc_root),
            Path(host_driver_root) if host_driver_root is not None else None,
            Path(hook_dir) if hook_dir is not None else None,
            driver_required,
        )

    # --- paths ---------------------------------------------------------------------------------------

    def host_path(self, seen: str | Path) -> str:
        """A path the plugin sees under the driver root, as the host (and so the CDI runtime) sees it."""
        seen = Path(seen)
        if self.host_driver_root is None or not seen.is_relative_to(self.driver_root):
            return str(seen)
        return str(self.host_driver_root / seen.relative_to(self.driver_root))

    def _node(self, name: str, required: bool) -> DeviceNode | None:
        host = self.dev_root / name
        if not os.path.exists(host):
            if required and self.driver_required:
                raise DriverFilesError(f"device node /dev/{name} does not exist in {self.dev_root}")
            return None
        return DeviceNode(path=f"/dev/{name}", host_path=self.host_path(host))

    # --- device nodes --------------------------------------------------------------------------------

    def control_nodes(self) -> tuple[DeviceNode, ...]:
        nodes = (self._node(n, n in REQUIRED_CONTROL_NODES) for n in CONTROL_NODES)
        return tuple(n for n in nodes if n)

    def gpu_nodes(self, minor: int) -> tuple[DeviceNode, ...]:
        if minor < 0:
            if self.driver_required:
                raise DriverFilesError("the device's GPU minor number is unknown (no 'minor' attribute)")
            return ()
        node = self._node(f"nvidia{minor}", required=True)
        return (node,) if node else ()

    def mig_nodes(self, minor: int, gpu_instance_id: int, compute_instance_id: int) -> tuple[DeviceNode, ...]:
        """The parent GPU's node plus the fully specified capability nodes of one GPU/compute instance."""
        if minor < 0:  # no capability directory can be named: say why, not which path was missing
            raise DriverFilesError(
                f"MIG capability nodes of gi{gpu_instance_id}/ci{compute_instance_id}: "
                "the device's GPU minor number is unknown (no 'minor' attribute)"
            )
        try:
            caps = mig_cap_nodes(self.proc_root, minor, gpu_instance_id, compute_instance_id)
        except MigCapsError as e:
            raise DriverFilesError(
                f"MIG capability nodes of gpu{minor}/gi{gpu_instance_id}/ci{compute_instance_id}: {e}"
            ) from None
        return (*self.gpu_nodes(minor), *caps)

    # --- driver files --------------------------------------------------------------------------------

    def driver_files(self) -> DriverFiles | None:
        """The driver's files, scanned again when the installed version changes; None without a driver
        (only when not `driver_required`)."""
        version = self._driver_version()
        if version is None and not self.driver_required:
            return None
        with self._lock:
            cached = self._scans.get(version)
            if cached is None:
                try:
                    cached = scan_driver(self.driver_root, version)
                except DriverFilesError:
                    if self.driver_required:
                        raise
                    return None
                self._scans.clear()  # one driver at a time: an old version's scan is stale
                self._scans[version] = cached
            return cached

    def _watched(self) -> tuple[str, ...]:
        """What to stat to notice a driver install or upgrade: each library search directory (and the ld
        cache) that exists, and for one that does not, its nearest ancestor that does: creating the
        directory changes that ancestor's mtime, and the next lookup then watches the directory itself.
        A node has a few of the eleven search directories, so this is a third of the stats of watching
        each, at every prepare (docs/performance.md)."""
        root = os.path.normpath(os.fspath(self.driver_root))
        watched: dict[str, None] = {}
        for d in _STAMPED:
            path = os.path.normpath(os.path.join(root, d))
            while path != root and not os.path.lexists(path):
                path = os.path.dirname(path)
            watched[path] = None
        return tuple(watched)

    @staticmethod
    def _stamp(paths: tuple[str, ...]) -> tuple:
        # Installing or upgrading a driver adds, renames or removes library files, which changes the mtime
        # of the directory they are in (or the ld cache that points to them). os.path strings, not
        # pathlib: this runs at every prepare.
        stamp = []
        for path in paths:
            try:
                st = os.stat(path)
                stamp.append((st.st_ino, st.st_mtime_ns))
            except OSError:
                stamp.append(None)
        return tuple(stamp)

    def _driver_version(self) -> str | None:
        """driver_version() again only when a watched directory changed: it globs and resolves every
        search directory, the largest cost of a prepare under the node lock (docs/performance.md)."""
        with self._lock:
            cached = self._version[0] if self._version else None
        if cached is not None and self._stamp(cached[0]) == cached[1]:
            return cached[2]
        watched = self._watched()
        stamp = self._stamp(watched)  # before the lookup: a change during it is seen at the next call
        version = driver_version(self.driver_root)
        with self._lock:
            self._version[:] = [(watched, stamp, version)]
        return version

    def _tool(self, name: str) -> str:
        if self.hook_dir is None:
            raise DriverFilesError(f"{name}: no hook directory configured (set --limiter-dir)")
        path = self.hook_dir / name
        if not path.is_file():
            raise DriverFilesError(f"{path} does not exist (the chart's init container installs it)")
        return str(path)

    def hook(self, *args: str) -> Hook:
        """A createContainer hook running carve-cdi-hook with `args` (its subcommand first)."""
        return Hook(path=self._tool(names.HOOK_BINARY), args=(names.HOOK_BINARY, *args))

    def driver_edits(self) -> ContainerEdits:
        """What every claim's containers get: control nodes, the driver's files, links and ld cache."""
        files = self.driver_files()
        if files is None:
            return ContainerEdits(env=(NO_LEGACY_RUNTIME_ENV,), device_nodes=self.control_nodes())
        with self._lock:
            cached = self._edits.get(id(files))
        if cached is not None and cached[0] is files:
            return cached[1]
        edits = self._driver_edits(files)
        with self._lock:
            self._edits.clear()
            self._edits[id(files)] = (files, edits)
        return edits

    def _driver_edits(self, files: DriverFiles) -> ContainerEdits:
        nodes = self.control_nodes()

        def mount(f, options: tuple[str, ...]) -> Mount:
            return Mount(self.host_path(self.driver_root / f.real), "/" + f.path, options)

        mounts = tuple(
            mount(f, LIBRARY_MOUNT_OPTIONS) for f in files.libraries + files.firmware + files.binaries
        ) + tuple(mount(f, IPC_MOUNT_OPTIONS) for f in files.ipc)
        hooks = []
        if files.symlinks:
            links = [a for target, link in files.symlinks for a in ("--link", f"{target}::{link}")]
            hooks.append(self.hook("create-symlinks", *links))
        if files.ldcache_folders:
            folders = [a for folder in files.ldcache_folders for a in ("--folder", folder)]
            ldconfig = self._tool(names.LDCONFIG_BINARY)
            hooks.append(self.hook("update-ldcache", "--ldconfig", ldconfig, *folders))
        return ContainerEdits(
            env=(NO_LEGACY_RUNTIME_ENV, f"{LIBCUDA_DIR_ENV}={':'.join(files.library_dirs)}"),
            device_nodes=nodes,
            mounts=mounts,
            hooks=tuple(hooks),
        )
