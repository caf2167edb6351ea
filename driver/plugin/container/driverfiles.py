"""The NVIDIA driver's files under a driver root, found by the rules of the container toolkit's CDI generator.

`scan_driver(root)` returns what a container needs of the installed driver (nvidia-container-toolkit,
pkg/nvcdi/driver-nvml.go and internal/discover; facts only, the code is carve's):

- version: the suffix of the first `libcuda.so.<X.Y[.Z]>` (else `libnvidia-ml.so.<...>`) in the library
  search directories, else in the driver root's own `etc/ld.so.cache`;
- libraries: every `*.so.<version>` in the directories holding a `lib*.so.<version>` (and their `vdpau/`),
  plus the legacy `libnvidia-nvvm70.so.*`; mounted at their own paths, symlinks resolved;
- firmware: `lib/firmware[/updates][/<kernel release>]/nvidia/<version>/gsp*.bin`;
- binaries: nvidia-smi, nvidia-debugdump, nvidia-persistenced, nvidia-cuda-mps-control/-server, nvidia-imex,
  nvidia-imex-ctl, the first found in the PATH directories;
- IPC: the persistenced and fabric manager sockets under run/ or var/run/, and tmp/nvidia-mps when present;
- links to create in the container: libcuda.so -> libcuda.so.1, SONAME -> versioned file and .so -> SONAME
  (each only where the driver root has that link), and the folders whose ld cache must know them.

Paths are relative to the root ("usr/lib64/libcuda.so.580.95.05"); the caller maps them to host paths.
Symlinks are followed inside the root: an absolute link target means <root>/<target>, as on the host.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from driver.plugin.container.libfiles import LibFileError, read_ld_cache, read_soname

LIBRARY_SEARCH_DIRS = (
    "",
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib/x86_64-linux-gnu/nvidia/current",
    "usr/lib/aarch64-linux-gnu/nvidia/current",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "lib/x86_64-linux-gnu/nvidia/current",
    "lib/aarch64-linux-gnu/nvidia/current",
)
BINARY_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin", "opt/bin")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
IPC_SOCKETS = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")
IPC_DIRS = ("run", "var/run")
MPS_PIPE_DIR = "tmp/nvidia-mps"
# Libraries without which no CUDA or NVML program runs: a driver root lacking them is an error.
REQUIRED_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
_VERSION = re.compile(r"^\d+(\.\d+)+$")


class DriverFilesError(Exception):
    """The driver root lacks what a container needs; the message names the missing file."""


@dataclass(frozen=True)
class DriverFile:
    path: str  # in the container, relative to / (the same path as under the driver root)
    real: str  # the file itself, relative to the driver root (symlinks resolved inside the root)


@dataclass(frozen=True)
class DriverFiles:
    version: str
    libraries: tuple[DriverFile, ...]
    firmware: tuple[DriverFile, ...]
    binaries: tuple[DriverFile, ...]
    ipc: tuple[DriverFile, ...]
    symlinks: tuple[tuple[str, str], ...]  # (target, absolute link path in the container)
    ldcache_folders: tuple[str, ...]  # absolute container directories, first seen first
    library_dirs: tuple[str, ...]  # absolute: where the lib*.so.<version> files are (NVIDIA_CTK_LIBCUDA_DIR)


def resolve_within(root: Path, path: Path) -> Path | None:
    """`path` (under `root`) with every symlink, of a directory or the file, followed as the host would
    with `root` as "/"; None if it dangles or loops.

    Path.resolve() would follow an absolute target (libcuda.so.1 -> /usr/lib64/libcuda.so.580.95.05) in
    the plugin's own filesystem, which is not the driver's when the driver root is mounted elsewhere; and
    ".." never climbs above the root.
    """
    root = Path(root)
    todo = list(Path(path).relative_to(root).parts)
    done = root
    links = 0
    while todo:
        part = todo.pop(0)  # Path.parts has no "" or "." parts: it drops them
        if part == "..":
            done = done.parent if done != root else root
            continue
        step = done / part
        if step.is_symlink():
            links += 1
            if links > 40:  # the kernel's own limit on nested links
                return None
            target = Path(os.readlink(step))
            if target.is_absolute():
                done = root
                todo = list(target.parts[1:]) + todo
            else:
                todo = list(target.parts) + todo
            continue
        done = step
    return done if done.exists() else None


def _rel(root: Path, path: Path) -> str:
    return str(path.relative_to(root))


def _glob_real(root: Path, dirs: tuple[str, ...], pattern: str) -> list[Path]:
    """Files matching `pattern` in `dirs` under the root, symlinks resolved, each once, in search order."""
    found: list[Path] = []
    for d in dirs:
        base = root / d
        if not base.is_dir():
            continue
        for candidate in sorted(base.glob(pattern)):
            real = resolve_within(root, candidate)
            if real is not None and real.is_file() and real not in found:
                found.append(real)
    return found


def _glob_located(root: Path, dirs: tuple[str, ...], pattern: str) -> list[DriverFile]:
    """Like _glob_real, but each file keeps the path it was found at (the toolkit's file locator)."""
    found: list[DriverFile] = []
    seen: set[Path] = set()
    for d in dirs:
        base = root / d
        if not base.is_dir():
            continue
        for candidate in sorted(base.glob(pattern)):
            real = resolve_within(root, candidate)
            if real is not None and real.is_file() and real not in seen:
                seen.add(real)
                found.append(DriverFile(_rel(root, candidate), _rel(root, real)))
    return found


def _from_ld_cache(root: Path, pattern: str) -> list[Path]:
    cache = root / "etc/ld.so.cache"
    if not cache.is_file():
        return []
    try:
        entries = read_ld_cache(cache)
    except LibFileError:
        return []
    # As the toolkit does: an entry matches when its path or the file it links to has a matching name.
    found: list[Path] = []
    for _, path in entries:
        if not path.startswith("/"):
            continue
        entry = root / path.lstrip("/")
        real = resolve_within(root, entry)
        if real is None or real in found:
            continue
        if fnmatch.fnmatchcase(entry.name, pattern) or fnmatch.fnmatchcase(real.name, pattern):
            found.append(real)
    return found


def _locate_libraries(root: Path, pattern: str) -> list[Path]:
    """The toolkit's library locator: the search directories first; the root's ld cache if they have none."""
    return _glob_real(root, LIBRARY_SEARCH_DIRS, pattern) or _from_ld_cache(root, pattern)


def driver_version(root: Path) -> str | None:
    """The installed driver's version, from the suffix of its libcuda (or libnvidia-ml) file name."""
    for lib in ("libcuda.so.", "libnvidia-ml.so."):
        for path in _locate_libraries(Path(root), lib + "*.*"):
            version = path.name.removeprefix(lib)
            if path.name.startswith(lib) and _VERSION.match(version):
                return version
    return None


def _so_link(name: str) -> str:
    """libcuda.so.1 -> libcuda.so; "" when the name has no .so part."""
    while True:
        stem, ext = os.path.splitext(name)
        if not ext:
            return ""
        if ext == ".so":
            return name
        name = stem


def _symlinks(root: Path, libraries: tuple[DriverFile, ...]) -> tuple[tuple[str, str], ...]:
    links: list[tuple[str, str]] = []

    def add(target: str, link: str) -> None:
        if (target, link) not in links:
            links.append((target, link))

    for lib in libraries:
        directory, name = os.path.split("/" + lib.path)
        # Many programs dlopen libcuda.so, which the driver installers do not create (toolkit's rule).
        if fnmatch.fnmatchcase(name, "libcuda.so.*.*"):
            add("libcuda.so.1", f"{directory}/libcuda.so")
        elif fnmatch.fnmatchcase(name, "libGLX_nvidia.so.*.*"):
            add(name, f"{directory}/libGLX_indirect.so.0")
        elif fnmatch.fnmatchcase(name, "libnvidia-opticalflow.so.*.*"):
            add("libnvidia-opticalflow.so.1", f"{directory}/libnvidia-opticalflow.so")
        if not fnmatch.fnmatchcase(name, "*.*.*"):
            continue
        host_dir = (root / lib.real).parent
        try:
            soname = read_soname(root / lib.real) or name
        except LibFileError:
            continue  # not an ELF library (the toolkit skips it too): no SONAME links
        if soname != name and (host_dir / soname).is_symlink():
            add(name, f"{directory}/{soname}")
        so = _so_link(soname)
        if so and so != soname and (host_dir / so).is_symlink():
            add(soname, f"{directory}/{so}")
    return tuple(links)


def _is_lib_name(name: str) -> bool:
    # Asked only of the libraries scan_driver lists, each <x>.so.<version> (or libnvidia-nvvm70.so.<n>): a
    # versioned name starting "lib" is the whole test (an unversioned lib<x>.so is never among them).
    return fnmatch.fnmatchcase(name, "lib?*.so.*")


def _unique(items) -> tuple:
    return tuple(dict.fromkeys(items))


def scan_driver(root: Path, version: str | None = None, kernel_release: str | None = None) -> DriverFiles:
    """Everything of the driver a container gets; DriverFilesError if its core libraries are missing."""
    root = Path(root)
    version = version or driver_version(root)
    if not version:
        raise DriverFilesError(
            f"no NVIDIA driver under {root}: no libcuda.so.<version> or libnvidia-ml.so.<version> in "
            f"{', '.join('/' + d for d in LIBRARY_SEARCH_DIRS if d)} nor in its etc/ld.so.cache "
            f"(set --driver-root)"
        )
    versioned = _locate_libraries(root, f"lib*.so.{version}")
    lib_dirs = _unique(p.parent for p in versioned)
    search = tuple(_rel(root, d) for d in lib_dirs) + tuple(_rel(root, d / "vdpau") for d in lib_dirs)
    libs = _glob_real(root, search, f"*.so.{version}") + _glob_real(
        root, tuple(_rel(root, d) for d in lib_dirs), "libnvidia-nvvm70.so.*"
    )
    libraries = tuple(DriverFile(_rel(root, p), _rel(root, p)) for p in _unique(libs))
    names = {Path(lib.path).name for lib in libraries}
    for required in REQUIRED_LIBRARIES:
        if f"{required}.{version}" not in names:
            raise DriverFilesError(
                f"driver {version} under {root}: {required}.{version} not found next to its other libraries "
                f"({', '.join('/' + _rel(root, d) for d in lib_dirs) or 'none found'})"
            )

    release = kernel_release if kernel_release is not None else os.uname().release
    firmware_dirs = (
        f"lib/firmware/updates/{release}",
        "lib/firmware/updates",
        f"lib/firmware/{release}",
        "lib/firmware",
    )
    firmware = tuple(_glob_located(root, tuple(f"{d}/nvidia/{version}" for d in firmware_dirs), "gsp*.bin"))
    binaries = []
    for name in BINARIES:
        for d in BINARY_DIRS:
            real = resolve_within(root, root / d / name)
            if real is not None and real.is_file() and os.access(real, os.X_OK):
                binaries.append(DriverFile(f"{d}/{name}", _rel(root, real)))
                break
    ipc = []
    for socket in IPC_SOCKETS:
        for d in IPC_DIRS:
            path = root / d / socket
            if path.exists() and not path.is_symlink():
                ipc.append(DriverFile(f"{d}/{socket}", f"{d}/{socket}"))
                break
    if (root / MPS_PIPE_DIR).is_dir() and not (root / MPS_PIPE_DIR).is_symlink():
        ipc.append(DriverFile(MPS_PIPE_DIR, MPS_PIPE_DIR))

    lib_paths = [Path("/" + lib.path) for lib in libraries]
    folders = _unique(str(p.parent) for p in lib_paths if _is_lib_name(p.name))
    return DriverFiles(
        version=version,
        libraries=libraries,
        firmware=firmware,
        binaries=tuple(binaries),
        ipc=tuple(ipc),
        symlinks=_symlinks(root, libraries),
        ldcache_folders=folders,
        library_dirs=tuple("/" + _rel(root, d) for d in lib_dirs),
    )
