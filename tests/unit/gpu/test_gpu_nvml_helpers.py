"""Pure helpers of the NVML reader: how NVML's raw values become Gpu fields."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from driver.gpu.model import Gpu, InventoryError, MigPlacement, MigProfile
from driver.gpu.nvml import (
    _ARCHITECTURES,
    _cuda_version,
    _multiprocessors,
    _pci_bus_id,
    _profile_name,
    fake_library_path,
)


def test_pci_bus_id_is_lower_case_with_a_four_digit_domain():
    assert _pci_bus_id(b"00000000:3B:00.0") == "0000:3b:00.0"
    assert _pci_bus_id("00000001:AF:1F.7") == "0001:af:1f.7"


def test_cuda_driver_version_is_major_dot_minor():
    assert _cuda_version(13000) == "13.0"
    assert _cuda_version(12080) == "12.8"


def test_architecture_names_come_from_pynvml_constants():
    assert _ARCHITECTURES[pynvml.NVML_DEVICE_ARCH_AMPERE] == "ampere"
    assert _ARCHITECTURES[pynvml.NVML_DEVICE_ARCH_BLACKWELL] == "blackwell"
    assert _ARCHITECTURES[pynvml.NVML_DEVICE_ARCH_TURING] == "turing"


def test_profile_name_from_nvml_strips_the_mig_prefix():
    assert _profile_name(0, SimpleNamespace(name=b"MIG 1g.10gb")) == "1g.10gb"
    assert _profile_name(7, SimpleNamespace(name=b"1g.10gb+me")) == "1g.10gb+me"


def test_profile_name_without_nvml_name_is_derived_from_slices_memory_and_index():
    info = SimpleNamespace(name=b"", sliceCount=1, memorySizeMB=9728)
    assert _profile_name(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, info) == "1g.10gb+me"
    assert _profile_name(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, info) == "1g.10gb"


def test_fake_library_dir_can_be_overridden(monkeypatch, tmp_path):
    monkeypatch.setenv("CARVE_FAKE_LIB_DIR", str(tmp_path))
    assert fake_library_path() == tmp_path / "libnvidia-ml.so.1"
    monkeypatch.delenv("CARVE_FAKE_LIB_DIR")
    assert fake_library_path().parts[-3:] == ("build", "fakes", "libnvidia-ml.so.1")


def test_memory_slice_count_comes_from_the_placements():
    profile = MigProfile(1, 0, "1g", 1, 1, 1, 0, 0, 0, 0, 0, 4, tuple(MigPlacement(i, 1) for i in range(4)))
    gpu = Gpu(
        "GPU-x",
        0,
        0,
        "p",
        1,
        1,
        "ampere",
        "8.0",
        "1.0",
        "13.0",
        "0000:00:00.0",
        True,
        True,
        (profile,),
    )
    assert gpu.memory_slice_count == 4
    assert gpu.profile("1g") is profile and gpu.profile(1) is profile


def _profile(sms: int) -> MigProfile:
    return MigProfile(1, 0, "7g", 7, 1, sms, 0, 0, 0, 0, 0, 1, (MigPlacement(0, 8),))


def _refuse(*_args):
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def test_sm_count_prefers_device_attributes(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlDeviceGetAttributes", lambda h: SimpleNamespace(multiprocessorCount=108))
    assert _multiprocessors("GPU 0", None, (8, 0), (_profile(98),)) == 108


def test_sm_count_falls_back_to_cuda_cores_before_mig_profiles(monkeypatch):
    # NVML answers GetAttributes for MIG handles only; an A100's largest profile has 98 of its 108 SMs.
    monkeypatch.setattr(pynvml, "nvmlDeviceGetAttributes", _refuse)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetNumGpuCores", lambda h: 6912)
    assert _multiprocessors("GPU 0", None, (8, 0), (_profile(98),)) == 108
    monkeypatch.setattr(pynvml, "nvmlDeviceGetNumGpuCores", lambda h: 16896)
    assert _multiprocessors("GPU 0", None, (9, 0), ()) == 132


def test_sm_count_uses_the_largest_mig_profile_only_as_a_last_resort(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlDeviceGetAttributes", _refuse)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetNumGpuCores", _refuse)
    assert _multiprocessors("GPU 0", None, (8, 0), (_profile(98),)) == 98
    with pytest.raises(InventoryError, match="GPU 0: neither nvmlDeviceGetAttributes"):
        _multiprocessors("GPU 0", None, (7, 5), ())
