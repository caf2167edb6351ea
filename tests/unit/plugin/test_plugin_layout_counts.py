"""Before each publish the plugin tells the NodePartitioning applier how many claims are prepared on each
GPU (server.py, _select_modes): a GPU's new migLayout is published only once that count is 0 (layouts_now).
A GPU without a prepared claim counts 0, one with claims counts them; an admin-access device does not
count."""

from __future__ import annotations

from types import SimpleNamespace

from driver import names
from driver.cluster import LocalCluster
from driver.gpu.model import Gpu
from driver.plugin.server import Plugin, PluginConfig
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord
from driver.plugin.state.locks import NodeLock


def _gpu(index: int) -> Gpu:
    return Gpu(
        f"GPU-{index}", index, index, "NVIDIA A100", 80 << 30, 108, "ampere", "8.0", "580.95.05", "13.0",
        f"0000:0{index}:00.0",
    )  # fmt: skip


class _Applier:
    def __init__(self) -> None:
        self.asked: list[dict[int, int]] = []

    def select_layouts(self, prepared: dict[int, int]) -> dict:
        self.asked.append(prepared)
        return {}


def _claim(uid: str, gpu: str, admin: bool = False) -> ClaimRecord:
    device = DeviceRecord(["r"], "p", "d", None, [], names.TYPE_VGPU, gpu, admin=admin)
    return ClaimRecord(uid, "ns", uid, STATE_COMPLETED, [device])


def test_the_layout_applier_gets_each_gpus_prepared_claims(tmp_path):
    plugin = Plugin(
        PluginConfig("node-a", plugin_dir=tmp_path, claim_status=False),
        LocalCluster(),
        [_gpu(0), _gpu(1), _gpu(2)],
        None,
        None,
    )
    state = {"a": _claim("a", "GPU-1"), "b": _claim("b", "GPU-1"), "c": _claim("c", "GPU-2", admin=True)}
    plugin.preparer = SimpleNamespace(
        node_lock=NodeLock(tmp_path / "plugin.lock"), sync=lambda: None, state=state
    )
    soft = {i: names.STRATEGY_SOFT for i in range(3)}
    plugin.publisher = SimpleNamespace(requested=soft, gates_off=frozenset())
    plugin.partitioning = applier = _Applier()
    plugin._select_modes(soft)
    assert applier.asked == [{0: 0, 1: 2, 2: 0}]
