"""HostLayout: the driver's nodes, files and hooks under the driver root, written as the host sees them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.driverroot import LAYOUTS, VERSION, build_driver_root, hook_dir, write_ld_cache, write_proc_root

from driver.plugin.container.edits import DriverFilesError, HostLayout


@pytest.fixture
def rhel(tmp_path, stub_cache) -> Path:
    return build_driver_root(tmp_path / "host", LAYOUTS["rhel"], stub_cache)


def layout_of(root: Path, tmp_path: Path, **kw) -> HostLayout:
    kw.setdefault("hook_dir", hook_dir(tmp_path / "lib"))
    return HostLayout.scan(root, tmp_path / "proc", **kw)


def mounts_of(layout: HostLayout) -> dict[str, str]:
    return {m.container_path: m.host_path for m in layout.driver_edits().mounts}


def test_absolute_driver_links_resolve_inside_the_driver_root(rhel, tmp_path):
    # rhel links are absolute (libcuda.so.1 -> /usr/lib64/libcuda.so.<v>): they mean <root>/usr/lib64/...
    (rhel / "usr/bin/nvidia-smi").unlink()
    os.symlink("/usr/bin/nvidia-debugdump", rhel / "usr/bin/nvidia-smi")
    mounts = mounts_of(layout_of(rhel, tmp_path))
    assert mounts[f"/usr/lib64/libcuda.so.{VERSION}"] == str(rhel / f"usr/lib64/libcuda.so.{VERSION}")
    assert mounts["/usr/bin/nvidia-smi"] == str(rhel / "usr/bin/nvidia-debugdump")
    assert "/usr/lib64/libcuda.so.1" not in mounts  # links are made in the container by the hook


def test_host_driver_root_translates_every_host_path(rhel, tmp_path):
    layout = layout_of(rhel, tmp_path, host_driver_root=Path("/"))
    edits = layout.driver_edits()
    assert {m.host_path for m in edits.mounts} >= {f"/usr/lib64/libcuda.so.{VERSION}", "/usr/bin/nvidia-smi"}
    assert all(not m.host_path.startswith(str(tmp_path)) for m in edits.mounts)
    assert ("/dev/nvidiactl", "/dev/nvidiactl") in [(n.path, n.host_path) for n in edits.device_nodes]


def test_the_gpu_operator_root_is_a_prefix_swap(tmp_path, stub_cache):
    root = build_driver_root(tmp_path / "driver-root", LAYOUTS["gpu-operator"], stub_cache)
    layout = layout_of(root, tmp_path, host_driver_root=Path("/run/nvidia/driver"))
    mounts = mounts_of(layout)
    lib = f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{VERSION}"
    assert mounts[lib] == "/run/nvidia/driver" + lib
    assert mounts["/run/nvidia-persistenced/socket"] == "/run/nvidia/driver/run/nvidia-persistenced/socket"


def test_mounts_use_rbind_and_rprivate_and_sockets_are_noexec(rhel, tmp_path):
    edits = layout_of(rhel, tmp_path).driver_edits()
    options = {m.container_path: m.options for m in edits.mounts}
    assert options[f"/usr/lib64/libcuda.so.{VERSION}"] == ("ro", "nosuid", "nodev", "rbind", "rprivate")
    assert options["/run/nvidia-persistenced/socket"] == ("nosuid", "nodev", "rbind", "rprivate", "noexec")


def test_every_library_of_the_driver_version_is_mounted_not_a_fixed_list(rhel, tmp_path):
    (rhel / f"usr/lib64/libnvidia-newthing.so.{VERSION}").write_bytes(b"\0")
    (rhel / "usr/lib64/libnvidia-ml.so.470.1.2").write_bytes(b"\0")  # another version: not this driver's
    mounts = mounts_of(layout_of(rhel, tmp_path))
    assert f"/usr/lib64/libnvidia-newthing.so.{VERSION}" in mounts
    assert f"/usr/lib64/libnvidia-gpucomp.so.{VERSION}" in mounts
    assert "/usr/lib64/libnvidia-nvvm70.so.4" in mounts
    assert f"/usr/lib64/vdpau/libvdpau_nvidia.so.{VERSION}" in mounts
    assert f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin" in mounts
    assert "/usr/lib64/libnvidia-ml.so.470.1.2" not in mounts


def test_libraries_only_in_the_driver_roots_ld_cache_are_found(tmp_path, stub_cache):
    root = build_driver_root(tmp_path / "host", LAYOUTS["gpu-operator"], stub_cache)  # relative links
    (root / "opt/nvidia").mkdir(parents=True)
    shutil.move(root / "usr/lib/x86_64-linux-gnu", root / "opt/nvidia/lib")  # no search path names it
    entries = [(n, f"/opt/nvidia/lib/{n}") for n in ("libcuda.so.1", "libnvidia-ml.so.1")]
    write_ld_cache(root / "etc/ld.so.cache", entries)
    mounts = mounts_of(layout_of(root, tmp_path))
    assert f"/opt/nvidia/lib/libcuda.so.{VERSION}" in mounts
    assert f"/opt/nvidia/lib/libnvidia-ptxjitcompiler.so.{VERSION}" in mounts


def test_a_missing_required_library_fails_naming_it(rhel, tmp_path):
    (rhel / f"usr/lib64/libnvidia-ml.so.{VERSION}").unlink()
    with pytest.raises(DriverFilesError, match=rf"libnvidia-ml\.so\.{VERSION} not found"):
        layout_of(rhel, tmp_path).driver_edits()


def test_no_driver_at_all_fails_naming_the_root(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DriverFilesError, match=r"no NVIDIA driver under .*empty"):
        layout_of(tmp_path / "empty", tmp_path).driver_edits()


def test_without_a_required_driver_only_what_exists_is_listed(tmp_path):
    (tmp_path / "empty/dev").mkdir(parents=True)
    edits = layout_of(tmp_path / "empty", tmp_path, driver_required=False).driver_edits()
    assert (edits.mounts, edits.device_nodes, edits.hooks) == ((), (), ())
    assert edits.env == ("NVIDIA_VISIBLE_DEVICES=void",)


@pytest.mark.parametrize("node", ["nvidiactl", "nvidia-uvm", "nvidia0"])
def test_a_missing_required_device_node_fails_naming_it(rhel, tmp_path, node):
    (rhel / "dev" / node).unlink()
    layout = layout_of(rhel, tmp_path)
    with pytest.raises(DriverFilesError, match=f"/dev/{node} does not exist"):
        layout.driver_edits()
        layout.gpu_nodes(0)


def test_nodes_are_checked_again_at_every_call(rhel, tmp_path):
    (rhel / "dev/nvidia-uvm").unlink()
    layout = layout_of(rhel, tmp_path)
    with pytest.raises(DriverFilesError):
        layout.driver_edits()
    (rhel / "dev/nvidia-uvm").touch()  # the uvm module loaded after the plugin started
    assert "/dev/nvidia-uvm" in [n.path for n in layout.driver_edits().device_nodes]


def test_optional_nodes_are_left_out_when_missing(rhel, tmp_path):
    (rhel / "dev/nvidia-modeset").unlink()
    nodes = [n.path for n in layout_of(rhel, tmp_path).driver_edits().device_nodes]
    assert nodes == ["/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl"]


def test_a_new_driver_version_is_scanned_again(rhel, tmp_path):
    layout = layout_of(rhel, tmp_path)
    assert f"/usr/lib64/libcuda.so.{VERSION}" in mounts_of(layout)
    lib = rhel / "usr/lib64"
    for f in list(lib.iterdir()):
        if f.name.endswith(VERSION):
            f.rename(lib / f.name.replace(VERSION, "590.1.2"))
    mounts = mounts_of(layout)
    assert "/usr/lib64/libcuda.so.590.1.2" in mounts and f"/usr/lib64/libcuda.so.{VERSION}" not in mounts


def test_hooks_link_libcuda_and_sonames_then_update_the_ld_cache(rhel, tmp_path):
    layout = layout_of(rhel, tmp_path)
    symlinks, ldcache = layout.driver_edits().hooks
    assert symlinks.path == str(tmp_path / "lib/carve-cdi-hook")
    links = symlinks.args[symlinks.args.index("create-symlinks") + 1 :][1::2]
    assert "libcuda.so.1::/usr/lib64/libcuda.so" in links
    assert f"libcuda.so.{VERSION}::/usr/lib64/libcuda.so.1" in links
    assert "libnvidia-ml.so.1::/usr/lib64/libnvidia-ml.so" in links
    assert not any("gpucomp" in link for link in links)  # its SONAME is its own name: nothing to link
    assert ldcache.args == (
        "carve-cdi-hook", "update-ldcache", "--ldconfig", str(tmp_path / "lib/carve-ldconfig"),
        "--folder", "/usr/lib64", "--folder", "/usr/lib64/vdpau",
    )  # fmt: skip
    assert symlinks.hook_name == ldcache.hook_name == "createContainer"


def test_a_missing_hook_binary_fails_naming_it(rhel, tmp_path):
    layout = layout_of(rhel, tmp_path)
    (tmp_path / "lib/carve-cdi-hook").unlink()
    with pytest.raises(DriverFilesError, match="carve-cdi-hook does not exist"):
        layout.driver_edits()


def test_mig_nodes_are_fully_specified_from_the_proc_root(rhel, tmp_path):
    write_proc_root(tmp_path / "proc", {(0, 3, None): (30, 292), (0, 3, 0): (31, 292)}, major=238)
    nodes = layout_of(rhel, tmp_path).mig_nodes(0, 3, 0)
    assert [(n.path, n.type, n.major, n.minor, n.file_mode) for n in nodes[1:]] == [
        ("/dev/nvidia-caps/nvidia-cap30", "c", 238, 30, 0o444),
        ("/dev/nvidia-caps/nvidia-cap31", "c", 238, 31, 0o444),
    ]
    assert nodes[0].path == "/dev/nvidia0"
    assert not (rhel / "dev/nvidia-caps").exists()  # they need not exist anywhere


def test_an_unreadable_capability_file_fails_naming_it(rhel, tmp_path):
    write_proc_root(tmp_path / "proc", {(0, 3, None): (30, 292)})
    with pytest.raises(DriverFilesError, match=r"gpu0/mig/gi3/ci0/access"):
        layout_of(rhel, tmp_path).mig_nodes(0, 3, 0)


def test_a_proc_root_without_the_caps_major_fails(rhel, tmp_path):
    write_proc_root(tmp_path / "proc", {(0, 3, None): (30, 292), (0, 3, 0): (31, 292)})
    (tmp_path / "proc/devices").write_text("Character devices:\n195 nvidia-frontend\n\nBlock devices:\n")
    with pytest.raises(DriverFilesError, match="no 'nvidia-caps'"):
        layout_of(rhel, tmp_path).mig_nodes(0, 3, 0)


def test_a_driver_installed_into_a_missing_search_directory_is_seen(rhel, tmp_path):
    """The version lookup watches a missing search directory through its nearest existing ancestor
    (fewer stats per prepare): creating the directory, then moving the driver's libraries into it, is seen
    at the next lookup, as an upgrade in place is."""
    layout = layout_of(rhel, tmp_path)
    assert f"/usr/lib64/libcuda.so.{VERSION}" in mounts_of(layout)
    assert not (rhel / "lib/x86_64-linux-gnu").exists()
    assert str(rhel / "lib/x86_64-linux-gnu") not in layout._watched()
    new = rhel / "lib/x86_64-linux-gnu"
    new.mkdir(parents=True)
    assert str(new) in layout._watched()
    layout.driver_edits()  # the lookup after the mkdir watches the new directory itself
    old = rhel / "usr/lib64"
    for f in list(old.iterdir()):
        if f.name.endswith(VERSION):
            f.rename(new / f.name.replace(VERSION, "590.1.2"))
    mounts = mounts_of(layout)
    assert "/lib/x86_64-linux-gnu/libcuda.so.590.1.2" in mounts, mounts


def test_creating_a_missing_search_directory_changes_the_watched_stamp(rhel, tmp_path):
    """The cached lookup notices the creation of a search directory whose parent already existed (the
    parent's mtime, as the nearest existing ancestor), before any library is in it."""
    (rhel / "lib").mkdir(exist_ok=True)
    layout = layout_of(rhel, tmp_path)
    layout.driver_edits()
    watched, stamp, _ = layout._version[0]
    assert str(rhel / "lib") in watched
    (rhel / "lib/x86_64-linux-gnu").mkdir()
    assert layout._stamp(watched) != stamp
