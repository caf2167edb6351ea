"""The mps strategy's devices and the memoryEnforcement attribute of shareable devices."""

from __future__ import annotations

from driver import names
from driver.devices import Settings, devices_for
from driver.devices.catalog import fake_gpu


def _attr(device: dict, key: str):
    return next(iter(device["attributes"][key].values()))


def test_mps_device_is_a_soft_device_with_type_mps_and_sharing_mps():
    gpu = fake_gpu("A100-80GB", 0)
    (soft,) = devices_for(gpu, "soft").devices
    (mps,) = devices_for(gpu, "mps").devices
    assert _attr(mps, "type") == names.TYPE_MPS
    assert _attr(mps, "sharing") == "mps"
    assert mps["capacity"] == soft["capacity"]
    assert mps["allowMultipleAllocations"] is True


def test_shareable_devices_say_who_enforces_memory():
    gpu, other = fake_gpu("T4", 0), fake_gpu("T4", 1)
    settings = Settings(driver_memory=frozenset({gpu.uuid}))
    for strategy in ("soft", "mps", "slots"):
        on_driver = devices_for(gpu, strategy, settings).devices
        on_limiter = devices_for(other, strategy, settings).devices
        assert {_attr(d, "memoryEnforcement") for d in on_driver} == {"driver"}
        assert {_attr(d, "memoryEnforcement") for d in on_limiter} == {"limiter"}


def test_whole_gpus_and_time_slices_carry_no_memory_enforcement():
    gpu = fake_gpu("T4", 0)
    settings = Settings(driver_memory=frozenset({gpu.uuid}))
    for strategy in ("exclusive", "timeslice"):
        (device,) = devices_for(gpu, strategy, settings).devices
        assert "memoryEnforcement" not in device["attributes"]
