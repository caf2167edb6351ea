"""A CDI device always has edits of its own: CDI refuses one without ("empty device edits") and containerd
then fails the pod, which fake GPUs on a driver root without /dev/nvidia* nodes used to produce."""

from pathlib import Path

from driver.cdi.spec import claim_spec
from driver.plugin.container.edits import ClaimDevice, claim_edits
from driver.plugin.container.hostlayout import HostLayout


def layout(root: Path) -> HostLayout:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    return HostLayout(driver_root=root, dev_root=root / "dev", proc_root=root, driver_required=False)


def test_devices_without_nodes_name_themselves_in_a_variable_of_their_own(tmp_path):
    devices = [ClaimDevice("uid1-gpu-0-a", 0), ClaimDevice("uid1-gpu-0-b", 0)]
    built = claim_edits(layout(tmp_path), devices)
    spec = claim_spec("uid1", built.devices, built.common)
    edits = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert edits == {
        "uid1-gpu-0-a": {"env": ["CARVE_FAKE_DEVICE_UID1_GPU_0_A=uid1-gpu-0-a"]},
        "uid1-gpu-0-b": {"env": ["CARVE_FAKE_DEVICE_UID1_GPU_0_B=uid1-gpu-0-b"]},
    }


def test_devices_with_nodes_get_only_their_nodes(tmp_path):
    host = layout(tmp_path)
    (tmp_path / "dev" / "nvidia0").touch()
    edits = claim_edits(host, [ClaimDevice("uid1-gpu-0", 0)])
    (device,) = edits.devices
    assert device.edits.env == () and [n.path for n in device.edits.device_nodes] == ["/dev/nvidia0"]
