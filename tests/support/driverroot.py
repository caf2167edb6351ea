"""Fake NVIDIA driver roots in the layouts real nodes have, for discovery, parity and loader tests.

Three layouts (LAYOUTS): a Debian/Ubuntu host (`/usr/lib/x86_64-linux-gnu`, merged /usr: `lib -> usr/lib`),
a RHEL host (`/usr/lib64`) and the GPU Operator's driver container root, which the host mounts at
`/run/nvidia/driver` (an Ubuntu-based root). The plugin sees a host driver at /host (`--driver-root /host
--host-driver-root /`), the Operator's at its own path. Libraries are real ELF shared objects with the
driver's SONAMEs (libcuda and libnvidia-ml are copies of the fakes of native/, the others empty stubs built
once per session with the C compiler), linked as the driver installers link them; binaries, firmware,
the persistenced socket and device nodes are placeholder files.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERSION = "580.95.05"
FAKES = REPO / "native/build/fakes"


@dataclass(frozen=True)
class Layout:
    name: str
    lib_dir: str  # relative to the driver root
    host_driver_root: str  # --host-driver-root: the same directory as the host names it
    merged_usr: bool  # lib -> usr/lib, as Debian 12 / Ubuntu hosts have it
    absolute_links: bool  # SONAME links with absolute targets (the runfile installer's style)


LAYOUTS = {
    "debian": Layout("debian", "usr/lib/x86_64-linux-gnu", "/", True, False),
    "rhel": Layout("rhel", "usr/lib64", "/", False, True),
    "gpu-operator": Layout("gpu-operator", "usr/lib/x86_64-linux-gnu", "/run/nvidia/driver", False, False),
}

# name -> SONAME of the stub libraries besides the two fakes (None: the file's own name, no SONAME link).
STUB_LIBRARIES = {
    f"libnvidia-ptxjitcompiler.so.{VERSION}": "libnvidia-ptxjitcompiler.so.1",
    f"libnvidia-nvvm.so.{VERSION}": "libnvidia-nvvm.so.4",
    f"libcudadebugger.so.{VERSION}": "libcudadebugger.so.1",
    f"libnvidia-gpucomp.so.{VERSION}": None,
    "libnvidia-nvvm70.so.4": "libnvidia-nvvm70.so.4",
    f"vdpau/libvdpau_nvidia.so.{VERSION}": "libvdpau_nvidia.so.1",
}
# Symlinks the installers create (link name -> target name), in the library directory.
INSTALLER_LINKS = {
    "libcuda.so.1": f"libcuda.so.{VERSION}",
    "libnvidia-ml.so.1": f"libnvidia-ml.so.{VERSION}",
    "libnvidia-ptxjitcompiler.so.1": f"libnvidia-ptxjitcompiler.so.{VERSION}",
    "libnvidia-nvvm.so.4": f"libnvidia-nvvm.so.{VERSION}",
    "libcudadebugger.so.1": f"libcudadebugger.so.{VERSION}",
    "libnvidia-ml.so": "libnvidia-ml.so.1",  # a -dev link: the toolkit recreates the .so links it sees
}
BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control")
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
DEVICE_NODES = ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


def stub_library(cache: Path, soname: str | None, name: str) -> Path:
    """An empty ELF shared object with the given SONAME, built once into `cache`."""
    out = cache / (soname or Path(name).name)
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        soname_flag = [f"-Wl,-soname,{soname}"] if soname else []
        subprocess.run(
            ["cc", "-shared", "-nostdlib", "-o", str(out), *soname_flag, "-x", "c", "/dev/null"],
            check=True,
            capture_output=True,
        )
    return out


def build_driver_root(root: Path, layout: Layout, stub_cache: Path) -> Path:
    """Lays out a driver root at `root` (the directory the plugin reads, e.g. what it sees as /host)."""
    root.mkdir(parents=True, exist_ok=True)
    if layout.merged_usr:
        (root / "usr/lib").mkdir(parents=True)
        os.symlink("usr/lib", root / "lib")
    lib = root / layout.lib_dir
    (lib / "vdpau").mkdir(parents=True)
    for fake, name in (("libcuda.so.1", "libcuda.so"), ("libnvidia-ml.so.1", "libnvidia-ml.so")):
        if not (FAKES / fake).exists():
            raise FileNotFoundError(f"{FAKES / fake}: run `make native`")
        shutil.copy2(FAKES / fake, lib / f"{name}.{VERSION}")
    for name, soname in STUB_LIBRARIES.items():
        shutil.copy2(stub_library(stub_cache, soname, name), lib / name)
    for link, target in INSTALLER_LINKS.items():
        os.symlink(f"/{layout.lib_dir}/{target}" if layout.absolute_links else target, lib / link)
    bindir = root / "usr/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for b in BINARIES:
        (bindir / b).write_text("#!/bin/sh\n")
        (bindir / b).chmod(0o755)
    fw = root / "lib/firmware/nvidia" / VERSION
    fw.mkdir(parents=True)
    for f in FIRMWARE:
        (fw / f).write_bytes(b"\0")
    (root / "run/nvidia-persistenced").mkdir(parents=True)
    (root / "run/nvidia-persistenced/socket").touch()
    (root / "dev").mkdir()
    for n in DEVICE_NODES:
        (root / "dev" / n).touch()
    return root


def write_proc_root(proc: Path, caps: dict[tuple[int, int, int | None], tuple[int, int]], major: int = 237):
    """A fake /proc: `devices` with the nvidia-caps major and the MIG access files.

    caps: (gpu minor, gi, ci or None) -> (device file minor, mode).
    """
    (proc / "driver/nvidia/capabilities").mkdir(parents=True, exist_ok=True)
    (proc / "devices").write_text(
        f"Character devices:\n  1 mem\n195 nvidia-frontend\n{major} nvidia-caps\n\nBlock devices:\n  8 sd\n"
    )
    for (gpu, gi, ci), (minor, mode) in caps.items():
        d = proc / "driver/nvidia/capabilities" / f"gpu{gpu}" / "mig" / f"gi{gi}"
        if ci is not None:
            d = d / f"ci{ci}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "access").write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")
    return proc


def write_ld_cache(path: Path, entries: list[tuple[str, str]]) -> Path:
    """A glibc ld.so.cache (format 1.1) with (name, path) entries, as ldconfig writes it."""
    strings = b""
    offsets = []
    header_size, entry_size = 48, 24
    base = header_size + entry_size * len(entries)
    for name, target in entries:
        key = base + len(strings)
        strings += name.encode() + b"\0"
        value = base + len(strings)
        strings += target.encode() + b"\0"
        offsets.append((key, value))
    data = struct.pack("<20sII B3x I 12x", b"glibc-ld.so.cache1.1", len(entries), len(strings), 2, 0)
    for key, value in offsets:
        data += struct.pack("<iIIIQ", 0x0303, key, value, 0, 0)  # x86-64 ELF library flags
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data + strings)
    return path


def hook_dir(path: Path) -> Path:
    """A limiter dir holding the built hook and a static ldconfig, as the chart's init container leaves it."""
    hook = REPO / "native/build/carve-cdi-hook"
    if not hook.exists():
        raise FileNotFoundError(f"{hook}: run `make native`")
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy2(hook, path / "carve-cdi-hook")
    # Ubuntu's /sbin/ldconfig is a shell wrapper around the static ldconfig.real; Debian's is static itself.
    ldconfig = next(p for p in ("/sbin/ldconfig.real", "/sbin/ldconfig") if Path(p).exists())
    shutil.copy2(ldconfig, path / "carve-ldconfig")
    for f in (path / "carve-cdi-hook", path / "carve-ldconfig"):
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return path
