"""HostLayout: driver files found under the driver root the plugin sees, written as the host sees them."""

from __future__ import annotations

import os
from pathlib import Path

from driver.plugin.edits import HostLayout


def _driver_root(root: Path) -> Path:
    (root / "usr/lib64").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "usr/lib64/libcuda.so.580.95.05").write_text("")
    # an absolute link, as driver installers make them: it means <root>/usr/lib64/..., not the plugin's /usr
    os.symlink("/usr/lib64/libcuda.so.580.95.05", root / "usr/lib64/libcuda.so.1")
    (root / "usr/lib64/libnvidia-ml.so.580.95.05").write_text("")
    os.symlink("libnvidia-ml.so.580.95.05", root / "usr/lib64/libnvidia-ml.so.1")
    os.symlink("/usr/lib64/gone.so", root / "usr/lib64/libnvidia-ptxjitcompiler.so.1")  # dangling
    (root / "usr/bin/nvidia-smi").write_text("")
    (root / "dev/nvidiactl").write_text("")
    return root


def test_absolute_driver_links_resolve_inside_the_driver_root(tmp_path):
    root = _driver_root(tmp_path / "host")
    layout = HostLayout.scan(root, tmp_path / "proc")
    mounts = {m.container_path: m.host_path for m in layout.driver_files}
    assert mounts == {
        "/usr/lib64/libcuda.so.1": str(root / "usr/lib64/libcuda.so.580.95.05"),
        "/usr/lib64/libnvidia-ml.so.1": str(root / "usr/lib64/libnvidia-ml.so.580.95.05"),
        "/usr/bin/nvidia-smi": str(root / "usr/bin/nvidia-smi"),
    }


def test_host_driver_root_translates_every_host_path(tmp_path):
    root = _driver_root(tmp_path / "host")
    layout = HostLayout.scan(root, tmp_path / "proc", host_driver_root=Path("/"))
    mounts = {m.container_path: m.host_path for m in layout.driver_files}
    assert mounts["/usr/lib64/libcuda.so.1"] == "/usr/lib64/libcuda.so.580.95.05"
    assert mounts["/usr/bin/nvidia-smi"] == "/usr/bin/nvidia-smi"
    assert [(n.path, n.host_path) for n in layout.common_nodes] == [("/dev/nvidiactl", "/dev/nvidiactl")]


def test_a_different_host_root_is_a_prefix_swap(tmp_path):
    root = _driver_root(tmp_path / "driver-root")
    layout = HostLayout.scan(root, tmp_path / "proc", host_driver_root=Path("/run/nvidia/driver"))
    assert {m.host_path for m in layout.driver_files} == {
        "/run/nvidia/driver/usr/lib64/libcuda.so.580.95.05",
        "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.580.95.05",
        "/run/nvidia/driver/usr/bin/nvidia-smi",
    }


def test_the_first_library_directory_holding_a_file_wins(tmp_path):
    root = _driver_root(tmp_path / "host")
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/libcuda.so.1").write_text("")  # a second copy, later in the search
    layout = HostLayout.scan(root, tmp_path / "proc")
    cuda = [m for m in layout.driver_files if m.container_path.endswith("/libcuda.so.1")]
    assert [(m.container_path, m.host_path) for m in cuda] == [
        ("/usr/lib64/libcuda.so.1", str(root / "usr/lib64/libcuda.so.580.95.05"))
    ]


def test_paths_outside_the_driver_root_are_not_translated(tmp_path):
    # No dev/ under the driver root: device nodes come from the plugin's /dev, where the host sees them too.
    root = tmp_path / "driver-root"
    root.mkdir()
    layout = HostLayout.scan(root, tmp_path / "proc", host_driver_root=Path("/run/nvidia/driver"))
    assert layout.dev_root == Path("/dev")
    assert layout.host_path("/dev/nvidia0") == "/dev/nvidia0"
    assert layout.host_path(root / "usr/bin/nvidia-smi") == "/run/nvidia/driver/usr/bin/nvidia-smi"


def test_mig_nodes_add_the_gpu_and_compute_instance_capability_nodes(tmp_path):
    root = _driver_root(tmp_path / "host")
    (root / "dev/nvidia0").write_text("")
    (root / "dev/nvidia-caps").mkdir()
    for minor in (30, 31):
        (root / f"dev/nvidia-caps/nvidia-cap{minor}").write_text("")
    gi = tmp_path / "proc/driver/nvidia/capabilities/gpu0/mig/gi3"
    (gi / "ci0").mkdir(parents=True)
    (gi / "access").write_text("DeviceFileMinor: 30\nDeviceFileMode: 292\n")
    (gi / "ci0" / "access").write_text("DeviceFileMinor: 31\nDeviceFileMode: 292\n")
    layout = HostLayout.scan(root, tmp_path / "proc")
    assert [n.path for n in layout.mig_nodes(0, 3, 0)] == [
        "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"
    ]
    assert [n.path for n in layout.mig_nodes(0, None, None)] == ["/dev/nvidia0"]  # not created yet
    assert [n.path for n in layout.mig_nodes(0, 4, 0)] == ["/dev/nvidia0"]  # no capability files
