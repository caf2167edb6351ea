"""When an unprepare makes the plugin publish at once (server.py, _after_unprepare) instead of at
its next interval: when the claim held up a GPU's mode change (its GPU is waiting for its prepared claims to
go), or when it used a MIG GPU whole (MIG mode off for it: the GPU can go back to MIG); not for a whole GPU
that is not MIG, nor for a claim on a GPU nothing waits for (a publish for nothing: a write of every slice's
resourceVersion to the API server)."""

from __future__ import annotations

import pytest

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.mig.modes import GpuMode
from driver.plugin.server import Plugin, PluginConfig
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord


def _plugin(tmp_path, effective: str, pending: str = "") -> Plugin:
    plugin = Plugin(
        PluginConfig("node-a", plugin_dir=tmp_path, claim_status=False), LocalCluster(), [], None, None
    )
    plugin.modes = {
        0: GpuMode(0, "GPU-0", effective, effective, effective if not pending else None, False, pending),
        1: GpuMode(1, "GPU-1", names.STRATEGY_SOFT, names.STRATEGY_SOFT, names.STRATEGY_SOFT, False),
    }
    return plugin


def _claim(gpu: str, device_type: str) -> ClaimRecord:
    return ClaimRecord(
        "u", "ns", "c", STATE_COMPLETED, [DeviceRecord(["r"], "p", "d", None, [], device_type, gpu)]
    )


@pytest.mark.parametrize(
    ("effective", "pending", "gpu", "device_type", "wakes"),
    [
        (names.STRATEGY_MIG, "", "GPU-0", names.TYPE_GPU, True),  # a MIG GPU used whole
        (names.STRATEGY_EXCLUSIVE, "", "GPU-0", names.TYPE_GPU, False),  # a whole GPU that is not MIG
        (names.STRATEGY_MIG, "", "GPU-1", names.TYPE_GPU, False),  # whole, but not the MIG GPU
        (names.STRATEGY_MIG, "waiting for 1 prepared claim", "GPU-0", names.TYPE_VGPU, True),
        (names.STRATEGY_MIG, "waiting for 1 prepared claim", "GPU-1", names.TYPE_VGPU, False),
        (names.STRATEGY_SOFT, "", "GPU-0", names.TYPE_VGPU, False),
    ],
)
def test_an_unprepare_publishes_at_once_only_when_a_gpu_waited_for_it(
    tmp_path, effective, pending, gpu, device_type, wakes
):
    plugin = _plugin(tmp_path, effective, pending)
    plugin._after_unprepare(_claim(gpu, device_type))
    assert plugin._wake.is_set() is wakes
