"""Host topology of a GPU (driver/gpu/pcie.py) and the standard attributes every device carries from it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from driver.devices import STRATEGIES, devices_for
from driver.devices.attributes import NUMA_NODE_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE
from driver.devices.catalog import fake_gpu
from driver.gpu import pcie


def kernel_layout(sysfs: Path, bus_id: str, path: str, absolute: bool = False) -> None:
    """A device as the kernel lays it out: devices/<path> and a bus/pci/devices link to it."""
    (sysfs / "devices" / path).mkdir(parents=True)
    links = sysfs / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    target = sysfs / "devices" / path if absolute else Path("../../../devices") / path
    (links / bus_id).symlink_to(target)


def test_pcie_root_is_the_first_component_below_devices(tmp_path):
    # A GPU behind a PCIe switch: root port, switch upstream and downstream ports, then the GPU.
    kernel_layout(tmp_path, "0000:3b:00.0", "pci0000:3a/0000:3a:00.0/0000:3b:00.0")
    kernel_layout(tmp_path, "0001:c1:00.0", "pci0001:c0/0001:c0:01.0/0001:c1:00.0/0001:c2:00.0/0001:c1:00.0")
    assert pcie.pcie_root(tmp_path, "0000:3b:00.0") == "pci0000:3a"
    assert pcie.pcie_root(tmp_path, "0001:c1:00.0") == "pci0001:c0"


@pytest.mark.parametrize(
    "bus_id, path",
    [
        ("0000:3b:00.0", None),  # no such device in sysfs
        ("0000:3b:00.0", "virtual/0000:3b:00.0"),  # not under devices/pci...
        ("0000:3b:00.0", "pci0000:3a/0000:3a:00.0/0000:3c:00.0"),  # link names another device
        ("0000:3B:00.0", "pci0000:3a/0000:3B:00.0"),  # not the lower-case BDF form Kubernetes requires
    ],
)
def test_pcie_root_is_left_out_rather_than_guessed(tmp_path, bus_id, path):
    if path:
        kernel_layout(tmp_path, bus_id, path)
    assert pcie.pcie_root(tmp_path, bus_id) is None


def test_an_absolute_link_outside_devices_is_refused(tmp_path):
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    os.symlink("/sys/devices/pci0000:00/0000:00:02.0", tmp_path / "bus" / "pci" / "devices" / "0000:00:02.0")
    assert pcie.pcie_root(tmp_path, "0000:00:02.0") is None


@pytest.mark.parametrize("mask, node", [([0b1], 0), ([0b110], 1), ([0, 0b1000], 67), ([0], None), ([], None)])
def test_numa_node_is_the_lowest_node_of_nvmls_mask(mask, node):
    assert pcie.numa_node(mask) == node


def test_fake_sysfs_gives_each_gpu_a_root_complex_of_its_own(tmp_path):
    pcie.write_fake_sysfs(tmp_path, [("0000:1d:00.0", 0), ("0000:25:00.0", 1), ("0000:2d:00.0", None)])
    pcie.write_fake_sysfs(tmp_path, [("0000:1d:00.0", 0)])  # a second process of the same topology
    roots = [pcie.pcie_root(tmp_path, b) for b in ("0000:1d:00.0", "0000:25:00.0", "0000:2d:00.0")]
    assert roots == ["pci0000:1c", "pci0000:24", "pci0000:2c"]
    numa = tmp_path / "devices" / "pci0000:24" / "0000:24:00.0" / "0000:25:00.0" / "numa_node"
    assert numa.read_text() == "1\n"
    assert not os.path.isabs(os.readlink(tmp_path / "bus" / "pci" / "devices" / "0000:1d:00.0"))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_device_of_every_strategy_carries_the_topology_attributes(strategy):
    gpu = dataclasses.replace(fake_gpu("A100-80GB", 1, "n1"), pcie_root="pci0000:3a", numa_node=1)
    for device in devices_for(gpu, strategy).devices:
        assert device["attributes"][PCIE_ROOT_ATTRIBUTE] == {"string": "pci0000:3a"}, device["name"]
        assert device["attributes"][NUMA_NODE_ATTRIBUTE] == {"int": 1}, device["name"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_host_that_does_not_tell_publishes_no_topology_attribute(strategy):
    gpu = fake_gpu("A100-80GB", 1, "n1")
    assert gpu.pcie_root is None and gpu.numa_node is None
    for device in devices_for(gpu, strategy).devices:
        assert PCIE_ROOT_ATTRIBUTE not in device["attributes"]
        assert NUMA_NODE_ATTRIBUTE not in device["attributes"]


def test_a_read_only_stand_in_leaves_fake_gpus_without_a_root(tmp_path, monkeypatch):
    from driver.gpu import nvml

    gpu = fake_gpu("T4", 0, "n1")
    monkeypatch.setattr(nvml, "backend", lambda: "fake:1xT4")
    monkeypatch.delenv("CARVE_SYSFS_ROOT", raising=False)

    def refuse(*_):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(pcie, "write_fake_sysfs", refuse)
    assert nvml.with_topology([gpu]) == [gpu]
    monkeypatch.setenv("CARVE_SYSFS_ROOT", str(tmp_path))
    kernel_layout(tmp_path, gpu.pci_bus_id, f"pci0000:00/0000:00:01.0/{gpu.pci_bus_id}")
    assert nvml.with_topology([gpu])[0].pcie_root == "pci0000:00"
