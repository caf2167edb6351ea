"""A driver root's library (or firmware) directory may hold names that match a library (or firmware)
pattern but are no such file: a link left dangling by a driver upgrade (its target removed) and a directory
whose name ends like one. scan_driver lists neither as a file the container mounts (a missing file fails
the container's start; a directory would be bind-mounted whole), and finds the real files beside them, the
driver's version included."""

from __future__ import annotations

import os
from pathlib import Path

from support.driverroot import LAYOUTS, VERSION, build_driver_root

from driver.plugin.container.driverfiles import driver_version, scan_driver

LIB = "usr/lib64"


def test_dangling_links_and_directories_are_not_libraries(tmp_path, stub_cache) -> None:
    root = build_driver_root(tmp_path / "host", LAYOUTS["rhel"], stub_cache)
    # Sorted before the real libcuda and libnvidia-ml files, so each is met first.
    os.symlink(f"libcuda.so.{VERSION}.old", root / LIB / "libcuda.so.0.0")
    os.symlink(f"libnvidia-gone.so.{VERSION}.old", root / LIB / f"libnvidia-gone.so.{VERSION}")
    (root / LIB / f"libnvidia-adir.so.{VERSION}").mkdir()
    assert driver_version(root) == VERSION
    found = scan_driver(root, None, "6.1.0")
    paths = {lib.path for lib in found.libraries}
    assert f"{LIB}/libcuda.so.{VERSION}" in paths and f"{LIB}/libnvidia-ml.so.{VERSION}" in paths
    assert not [p for p in paths if "libnvidia-gone" in p or "libnvidia-adir" in p]
    assert all((root / p).is_file() for p in paths)


def test_dangling_links_and_directories_are_not_firmware(tmp_path, stub_cache) -> None:
    root = build_driver_root(tmp_path / "host", LAYOUTS["rhel"], stub_cache)
    firmware = root / "lib/firmware/nvidia" / VERSION
    os.symlink("gsp_gone.bin.old", firmware / "gsp_aaa_gone.bin")
    (firmware / "gsp_aab_dir.bin").mkdir()
    found = scan_driver(root, VERSION, "6.1.0")
    assert sorted(Path(f.path).name for f in found.firmware) == ["gsp_ga10x.bin", "gsp_tu10x.bin"]
