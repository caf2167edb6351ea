"""The per-model MIG examples and the plain whole-GPU template take what their comments promise, on a node
whose slices come from the real device model: an H200 and an A100-40GB in MIG mode, and a T4."""

from __future__ import annotations

import pytest
from test_deviceclasses_examples import _devices, _results

LAYOUT = [("T4", "exclusive"), ("H200-141GB", "mig"), ("A100-40GB", "mig")]


def test_h200_1g18gb_takes_a_1g18gb_instance_of_the_h200() -> None:
    ((request, device),) = _devices(_results("mig-h200-1g18gb.yaml", LAYOUT))
    assert request == "gpu" and device.startswith("gpu-1-mig-1g18gb-")


def test_a100_40gb_1g5gb_takes_a_1g5gb_instance_of_the_a100() -> None:
    ((request, device),) = _devices(_results("mig-a100-40gb-1g5gb.yaml", LAYOUT))
    assert request == "gpu" and device.startswith("gpu-2-mig-1g5gb-")


def test_a_profile_of_another_model_does_not_fit() -> None:
    from driver.allocator import Unallocatable

    with pytest.raises(Unallocatable):
        _results("mig-h200-1g18gb.yaml", [("A100-40GB", "mig")])


def test_the_whole_gpu_template_takes_the_exclusive_gpu() -> None:
    assert _devices(_results("whole-gpu.yaml", LAYOUT)) == [("gpu", "gpu-0")]
