"""What a container gets of the driver beyond its libraries (driver/plugin/container/driverfiles.py), as the
NVIDIA container toolkit gives it: the compatibility links programs dlopen (libGLX_indirect.so.0 for the GLX
library, libnvidia-opticalflow.so for the optical-flow one, libcuda.so), SONAME links only for ELF
libraries whose link the installer made, and the MPS pipe directory when one is there and is a directory of
its own, never a link (a link would mount whatever it points to into every container)."""

from __future__ import annotations

import os

from support.driverroot import LAYOUTS, VERSION, build_driver_root, stub_library

from driver.plugin.container.driverfiles import MPS_PIPE_DIR, scan_driver

LIB = "usr/lib64"


def _root(tmp_path, stub_cache):
    return build_driver_root(tmp_path / "host", LAYOUTS["rhel"], stub_cache)


def test_glx_and_optical_flow_get_the_links_programs_dlopen(tmp_path, stub_cache):
    root = _root(tmp_path, stub_cache)
    (root / LIB / f"libGLX_nvidia.so.{VERSION}").write_bytes(
        stub_library(stub_cache, "libGLX_nvidia.so.0", "glx").read_bytes()
    )
    os.symlink(f"libGLX_nvidia.so.{VERSION}", root / LIB / "libGLX_nvidia.so.0")
    (root / LIB / f"libnvidia-opticalflow.so.{VERSION}").write_bytes(
        stub_library(stub_cache, "libnvidia-opticalflow.so.1", "of").read_bytes()
    )
    os.symlink(f"libnvidia-opticalflow.so.{VERSION}", root / LIB / "libnvidia-opticalflow.so.1")
    links = set(scan_driver(root, VERSION, "6.1.0").symlinks)
    assert (f"libGLX_nvidia.so.{VERSION}", f"/{LIB}/libGLX_indirect.so.0") in links
    assert ("libnvidia-opticalflow.so.1", f"/{LIB}/libnvidia-opticalflow.so") in links
    assert ("libcuda.so.1", f"/{LIB}/libcuda.so") in links
    # and the SONAME links the installer made, for these as for the others
    assert (f"libGLX_nvidia.so.{VERSION}", f"/{LIB}/libGLX_nvidia.so.0") in links
    assert (f"libnvidia-opticalflow.so.{VERSION}", f"/{LIB}/libnvidia-opticalflow.so.1") in links


def test_a_library_that_is_not_elf_is_mounted_but_gets_no_soname_link(tmp_path, stub_cache):
    root = _root(tmp_path, stub_cache)
    (root / LIB / f"libnvidia-a-text.so.{VERSION}").write_text("not an ELF file\n")
    os.symlink(f"libnvidia-a-text.so.{VERSION}", root / LIB / "libnvidia-a-text.so.1")
    found = scan_driver(root, VERSION, "6.1.0")
    assert f"{LIB}/libnvidia-a-text.so.{VERSION}" in {lib.path for lib in found.libraries}
    assert not [link for link in found.symlinks if "libnvidia-a-text" in link[0] + link[1]]
    # the libraries after it still get theirs
    assert (f"libnvidia-ml.so.{VERSION}", f"/{LIB}/libnvidia-ml.so.1") in found.symlinks


def test_the_mps_pipe_directory_is_given_when_it_is_a_directory(tmp_path, stub_cache):
    root = _root(tmp_path, stub_cache)
    assert MPS_PIPE_DIR not in {f.path for f in scan_driver(root, VERSION, "6.1.0").ipc}
    (root / MPS_PIPE_DIR).mkdir(parents=True)
    ipc = scan_driver(root, VERSION, "6.1.0").ipc
    assert [(f.path, f.real) for f in ipc if f.path == MPS_PIPE_DIR] == [(MPS_PIPE_DIR, MPS_PIPE_DIR)]
    assert "run/nvidia-persistenced/socket" in {f.path for f in ipc}  # the socket before it is kept


def test_an_mps_pipe_directory_that_is_a_link_is_not_given(tmp_path, stub_cache):
    root = _root(tmp_path, stub_cache)
    (root / "etc/secrets").mkdir(parents=True)
    (root / "tmp").mkdir()
    os.symlink("../etc/secrets", root / MPS_PIPE_DIR)  # a directory inside the root, through a link
    assert MPS_PIPE_DIR not in {f.path for f in scan_driver(root, VERSION, "6.1.0").ipc}
