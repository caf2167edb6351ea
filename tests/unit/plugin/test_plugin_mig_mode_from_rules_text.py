"""MIG mode follows the strategy a GPU's rule gives, and that strategy is text the admin wrote
(`--strategy`, the node annotation): a slice of the rules string, not the plugin's own constant. So `mig` is
compared by value: a GPU with MIG mode off is switched on, one already in MIG mode is left alone, and a GPU
whose NVML refused MIG mode before serves the fallback strategy without being asked again."""

from __future__ import annotations

from driver import names
from driver.devices.catalog import fake_gpu
from driver.devices.rules import parse_rules, resolve
from driver.gpu.model import Gpu
from driver.plugin.mig.modes import apply_modes


class Switch:
    """NVML's MIG mode switch, applying each change at once and counting what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def set_mig_mode(self, uuid: str, enabled: bool) -> tuple[bool, bool | None]:
        self.calls.append((uuid, enabled))
        return enabled, None


def gpu(index: int, mig: bool) -> Gpu:
    return fake_gpu("A100-80GB", index, "n1", mig_enabled=mig)


def test_mig_from_the_rules_text_switches_only_the_gpu_that_needs_it() -> None:
    gpus = [gpu(0, mig=False), gpu(1, mig=True), gpu(2, mig=False)]
    # As the flag's value arrives: a string built at run time, its strategies slices of it.
    text = ",".join(["0=mig", "1=mig", "2=mig", names.STRATEGY_EXCLUSIVE])
    desired = {i: r.strategy for i, r in resolve(gpus, parse_rules(text)).items()}
    refused = {gpus[2].uuid: "cannot enable MIG mode: RuntimeError: NVML_ERROR_NO_PERMISSION"}
    switch = Switch()
    out, modes = apply_modes(gpus, desired, switch, refused=refused, fallback_to=names.STRATEGY_SOFT)
    assert switch.calls == [(gpus[0].uuid, True)]
    assert {i: (m.effective, m.applied, m.pending) for i, m in modes.items()} == {
        0: (names.STRATEGY_MIG, names.STRATEGY_MIG, ""),
        1: (names.STRATEGY_MIG, names.STRATEGY_MIG, ""),
        2: (names.STRATEGY_SOFT, names.STRATEGY_SOFT, ""),
    }
    assert [g.mig_enabled for g in out] == [True, True, False]
