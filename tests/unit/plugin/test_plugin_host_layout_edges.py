"""HostLayout at its edges (driver/plugin/container/hostlayout.py), as a prepare sees them: a device
without a GPU minor fails the prepare on a real node and gives no node on a node without a driver (fake
GPUs); a driver root whose driver is broken (its core library missing) fails on a real node and gives the
container no driver files otherwise; driver hooks without a hook directory fail naming the flag to set."""

from __future__ import annotations

import os

import pytest
from support.driverroot import LAYOUTS, VERSION, build_driver_root, hook_dir

from driver.plugin.container.edits import DriverFilesError, HostLayout


def _layout(tmp_path, stub_cache, *, required=True, hooks=True, broken=False):
    root = build_driver_root(tmp_path / "host", LAYOUTS["rhel"], stub_cache)
    if broken:  # libcuda gone, libnvidia-ml still there: a version is found, its core is not
        os.unlink(root / "usr/lib64" / f"libcuda.so.{VERSION}")
    return HostLayout.scan(
        root,
        tmp_path / "proc",
        hook_dir=hook_dir(tmp_path / "lib") if hooks else None,
        driver_required=required,
    )


def test_a_device_without_a_gpu_minor_fails_on_a_real_node_and_gives_no_node_otherwise(tmp_path, stub_cache):
    real = _layout(tmp_path, stub_cache)
    with pytest.raises(
        DriverFilesError, match=r"the device's GPU minor number is unknown \(no 'minor' attribute\)"
    ):
        real.gpu_nodes(-1)
    assert [n.path for n in real.gpu_nodes(0)] == ["/dev/nvidia0"]
    fake = HostLayout.scan(tmp_path / "empty", tmp_path / "proc", driver_required=False)
    assert fake.gpu_nodes(-1) == ()


def test_a_broken_driver_fails_on_a_real_node_and_gives_no_driver_files_otherwise(tmp_path, stub_cache):
    with pytest.raises(DriverFilesError, match=f"libcuda.so.{VERSION} not found"):
        _layout(tmp_path / "a", stub_cache, broken=True).driver_files()
    lenient = _layout(tmp_path / "b", stub_cache, required=False, broken=True)
    assert lenient.driver_files() is None
    edits = lenient.driver_edits()
    assert edits.mounts == () and edits.hooks == ()  # the control nodes only


def test_driver_hooks_without_a_hook_directory_fail_naming_the_flag(tmp_path, stub_cache):
    layout = _layout(tmp_path, stub_cache, hooks=False)
    with pytest.raises(DriverFilesError) as e:
        layout.driver_edits()
    assert str(e.value) == "carve-cdi-hook: no hook directory configured (set --limiter-dir)"


def test_a_layout_made_without_saying_is_the_strict_one_of_a_real_node(tmp_path):
    # fail closed by default: only fake GPUs (--gpus fake:...) ask for the lenient layout
    layout = HostLayout(driver_root=tmp_path, dev_root=tmp_path / "dev", proc_root=tmp_path)
    with pytest.raises(DriverFilesError):
        layout.gpu_nodes(-1)
    with pytest.raises(DriverFilesError, match="no NVIDIA driver under"):
        layout.driver_files()
