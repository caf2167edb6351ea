"""A GPU whose NVML refuses MIG mode goes to the fallback strategy (--fallback-strategy) that its current
mode already serves: NVML is asked once (the refused enable), not a second time for a switch the fallback
does not need, and the GPU is left with no pending reason (a pending GPU is held back from publishing)."""

from __future__ import annotations

from driver import names
from driver.devices.catalog import fake_gpu
from driver.gpu.model import Gpu
from driver.plugin.mig.modes import apply_modes

MIG, SOFT = names.STRATEGY_MIG, names.STRATEGY_SOFT


class RefusingSwitch:
    """NVML refusing every MIG mode change of the GPU (no permission), counting what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def set_mig_mode(self, uuid: str, enabled: bool) -> tuple[bool, bool | None]:
        self.calls.append((uuid, enabled))
        raise RuntimeError("NVML_ERROR_NO_PERMISSION")


def _gpu() -> Gpu:
    return fake_gpu("A100-80GB", 0, "n1", mig_enabled=False)  # MIG mode off: what the fallback needs


def test_a_refused_mig_enable_falls_back_without_a_second_switch() -> None:
    gpu, switch = _gpu(), RefusingSwitch()
    refused: dict[str, str] = {}
    _, modes = apply_modes([gpu], {0: MIG}, switch, refused=refused, fallback_to=SOFT)
    assert switch.calls == [(gpu.uuid, True)]  # only the enable; MIG mode is already off for the fallback
    mode = modes[0]
    assert (mode.effective, mode.applied, mode.action) == (SOFT, SOFT, "")
    assert mode.pending == ""  # nothing left to wait for: the GPU serves the fallback now
    assert "NVML_ERROR_NO_PERMISSION" in mode.fallback and "NVML_ERROR_NO_PERMISSION" in refused[gpu.uuid]
