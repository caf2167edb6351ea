"""Which libnvidia-ml.so.1 the memory-partition hook is told to dlopen (nvml_host_path): the driver root's
own, as the host names it, whenever the driver root has one; with fake GPUs and a driver root without NVML,
the fake library; and none when neither exists."""

from __future__ import annotations

from pathlib import Path

from support.driverroot import LAYOUTS, build_driver_root, write_proc_root

from driver.plugin.container.enforcement_edits import nvml_host_path
from driver.plugin.container.hostlayout import HostLayout


def _empty_layout(root: Path) -> HostLayout:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    return HostLayout(driver_root=root, dev_root=root / "dev", proc_root=root, driver_required=False)


def _fake_dir(path: Path, with_nvml: bool) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if with_nvml:
        (path / "libnvidia-ml.so.1").write_bytes(b"\x7fELF")
    return path


def test_without_the_drivers_nvml_the_fake_library_is_used(tmp_path):
    fake = _fake_dir(tmp_path / "fake", with_nvml=True)
    assert nvml_host_path(_empty_layout(tmp_path / "root"), fake) == str(fake / "libnvidia-ml.so.1")


def test_a_fake_directory_without_the_library_gives_none(tmp_path):
    layout = _empty_layout(tmp_path / "root")
    assert nvml_host_path(layout, _fake_dir(tmp_path / "fake", with_nvml=False)) is None
    (tmp_path / "fake" / "libnvidia-ml.so.1").mkdir()  # a directory of that name is no library
    assert nvml_host_path(layout, tmp_path / "fake") is None
    assert nvml_host_path(layout, None) is None


def test_the_driver_roots_nvml_wins_over_the_fake_one(tmp_path, stub_cache):
    driver = build_driver_root(tmp_path / "root", LAYOUTS["rhel"], stub_cache)
    proc = write_proc_root(tmp_path / "proc", {})
    layout = HostLayout.scan(driver, proc)
    fake = _fake_dir(tmp_path / "fake", with_nvml=True)
    got = nvml_host_path(layout, fake)
    assert got is not None and got != str(fake / "libnvidia-ml.so.1")
    assert Path(got).name.startswith("libnvidia-ml.so.") and Path(got).is_file()
    assert Path(got).is_relative_to(driver)
