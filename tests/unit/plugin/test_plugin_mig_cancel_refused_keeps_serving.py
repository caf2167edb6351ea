"""An idle GPU whose MIG mode serves its strategy but has a change left pending (set by hand, applied at the
next reset) gets the pending change cancelled by asking NVML for its current mode again. When NVML refuses
that, the GPU still serves its strategy: it stays published (`applied`), with the refusal as its pending
reason, rather than being withdrawn for a mode it is already in."""

from __future__ import annotations

import dataclasses

from driver import names
from driver.devices.catalog import fake_gpu
from driver.plugin.mig.modes import apply_modes

EXCLUSIVE = names.STRATEGY_EXCLUSIVE


class RefusingSwitch:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def set_mig_mode(self, uuid: str, enabled: bool) -> tuple[bool, bool | None]:
        self.calls.append((uuid, enabled))
        raise RuntimeError("NVML_ERROR_NO_PERMISSION")


def test_a_refused_cancel_leaves_the_gpu_serving_its_strategy() -> None:
    # MIG mode off (what exclusive needs), an enable pending until the next reset
    gpu = dataclasses.replace(fake_gpu("A100-80GB", 0, "n1", mig_enabled=False), mig_pending=True)
    switch = RefusingSwitch()
    _, modes = apply_modes([gpu], {0: EXCLUSIVE}, switch)
    assert switch.calls == [(gpu.uuid, False)]  # the current mode (off) asked for again
    mode = modes[0]
    assert (mode.effective, mode.applied, mode.action) == (EXCLUSIVE, EXCLUSIVE, "")
    assert "NVML_ERROR_NO_PERMISSION" in mode.pending
