"""A driver found only through the driver root's ld.so.cache (the GPU Operator's driver container puts its
libraries where no search path names them) next to the root's other libraries, which that cache lists too:
only the driver's libraries are taken, so the container's NVIDIA_CTK_LIBCUDA_DIR and ld cache folders name the
driver's directory alone and nothing of the root's libc or other packages is mounted into claims."""

from __future__ import annotations

import shutil

from support.driverroot import LAYOUTS, VERSION, build_driver_root, write_ld_cache

from driver.plugin.container.driverfiles import scan_driver


def test_only_the_drivers_libraries_are_taken_from_a_shared_ld_cache(tmp_path, stub_cache):
    root = build_driver_root(tmp_path / "host", LAYOUTS["gpu-operator"], stub_cache)
    (root / "opt/nvidia").mkdir(parents=True)
    shutil.move(root / "usr/lib/x86_64-linux-gnu", root / "opt/nvidia/lib")  # no search path names it
    other = root / "opt/other/lib"
    other.mkdir(parents=True)
    for name in ("libc.so.6", "libz.so.1", f"libfoo.so.{VERSION}"):  # the last even shares the version
        (other / name).write_bytes(b"\x7fELF")
    entries = [(n, f"/opt/other/lib/{n}") for n in ("libc.so.6", "libz.so.1")]
    entries += [(n, f"/opt/nvidia/lib/{n}") for n in ("libcuda.so.1", "libnvidia-ml.so.1")]
    write_ld_cache(root / "etc/ld.so.cache", entries)
    found = scan_driver(root, kernel_release="6.1.0")
    assert found.version == VERSION
    assert found.library_dirs == ("/opt/nvidia/lib",)
    assert found.ldcache_folders == ("/opt/nvidia/lib", "/opt/nvidia/lib/vdpau")
    assert not [lib.path for lib in found.libraries if lib.path.startswith("opt/other")]
    assert f"opt/nvidia/lib/libcuda.so.{VERSION}" in {lib.path for lib in found.libraries}
