"""A claim's region directory is a size-capped tmpfs of its own when the plugin may mount one (issue 32,
attack 5): what decides it (`--region-fs`), that a capped directory is capped once, and that blocks a tenant
allocates past the end of a region are given back where no cap holds them."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from support.mounts import unmount_under

from driver import names
from driver.limits import ClaimLimits, DeviceLimit
from driver.limits.region import punch_past_end
from driver.plugin.container import regionfs
from driver.plugin.container.claimfiles import write_claim_files
from driver.plugin.container.edits import ClaimFiles

LIMITS = ClaimLimits(devices=(DeviceLimit(2 << 30, 30, uuid="GPU-A"),), region_path="/var/run/carve/u/region")


def limiter_dir(tmp_path: Path) -> Path:
    d = tmp_path / "limiter"
    d.mkdir()
    (d / names.LIMITER_LIBRARY).write_bytes(b"\0")
    (d / names.HOOK_BINARY).write_bytes(b"\0")
    return d

FALLOC_FL_KEEP_SIZE = 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def _can_mount() -> bool:
    return os.geteuid() == 0 and Path("/proc/self/mountinfo").exists()


needs_mount = pytest.mark.skipif(not _can_mount(), reason="mounting a tmpfs needs root (CI runs as root)")


def _mounts_at(directory: Path) -> int:
    point = str(directory.resolve())
    return sum(line.split()[4] == point for line in Path("/proc/self/mountinfo").read_text().splitlines())


@pytest.fixture
def scratch(tmp_path):
    yield tmp_path
    unmount_under(tmp_path)


@needs_mount
@pytest.mark.parametrize(("region_fs", "capped"), [("on", True), ("off", False)])
def test_region_fs_decides_whether_the_region_directory_is_a_tmpfs(scratch, region_fs, capped):
    files = ClaimFiles(scratch / "claims" / "u")
    write_claim_files(files, limiter_dir(scratch), LIMITS, region_fs=region_fs)
    assert os.path.ismount(files.region_dir) is capped
    assert files.region.is_file()


@needs_mount
def test_a_capped_directory_is_capped_once(scratch):
    directory = scratch / "region"
    directory.mkdir(mode=0o755)
    assert regionfs.cap(directory, force=True)
    assert regionfs.cap(directory, force=True)  # a second prepare of the claim: the same mount, no second one
    assert _mounts_at(directory) == 1
    total = os.statvfs(directory)
    assert total.f_blocks * total.f_frsize <= regionfs.FS_BYTES + 4096


@pytest.mark.parametrize("where", ["tmp", "shm"])
def test_blocks_past_the_end_of_a_region_are_given_back(tmp_path, where):
    base = tmp_path if where == "tmp" else Path("/dev/shm")
    if where == "shm" and not os.access(base, os.W_OK):
        pytest.fail("/dev/shm is not writable here: the tmpfs case cannot run")
    path = base / f"carve-region-punch-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"x" * 4096)
        # What a tenant does through its read-write region: blocks past the end, st_size unchanged.
        assert _libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 8 << 20) == 0, ctypes.get_errno()
        assert os.fstat(fd).st_blocks * 512 >= 8 << 20
        punch_past_end(fd, 4096)
        st = os.fstat(fd)
        assert st.st_size == 4096
        assert st.st_blocks * 512 <= 64 << 10, st.st_blocks
        assert os.pread(fd, 4096, 0) == b"x" * 4096  # the region's own bytes stay
    finally:
        os.close(fd)
        path.unlink()


def test_is_mount_agrees_with_os_path_ismount(tmp_path):
    """cap()'s mount-point check (regionfs._is_mount, without ismount's realpath walk) answers as
    os.path.ismount does: mount points, plain directories, a symlink to a mount point, a missing path, a
    directory reached through a symlinked parent."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "to-root").symlink_to("/")
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "child").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    candidates = ["/", "/proc", "/dev", tmp_path, tmp_path / "plain", tmp_path / "to-root", tmp_path / "nope"]
    candidates.append(tmp_path / "via" / "child")
    for path in candidates:
        assert regionfs._is_mount(Path(path)) == os.path.ismount(path), path
    assert regionfs._is_mount(Path("/proc")) and not regionfs._is_mount(tmp_path / "plain")


@needs_mount
def test_is_mount_sees_a_region_tmpfs(tmp_path):
    d = tmp_path / "region"
    d.mkdir(mode=0o755)
    try:
        assert not regionfs._is_mount(d)
        assert regionfs.cap(d, force=True)
        assert regionfs._is_mount(d) and os.path.ismount(d)
    finally:
        unmount_under(tmp_path)
