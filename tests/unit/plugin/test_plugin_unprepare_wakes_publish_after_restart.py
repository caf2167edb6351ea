"""An unprepare after a restart makes the plugin publish at once exactly when one in the same process would
(server.py, `_after_unprepare`; the cases of test_plugin_unprepare_wakes_publish.py): the claim's record is
then the checkpoint's, read back from its JSON file, and each GPU's strategy is a slice of the `--strategy`
text, so the device types and strategies are compared by value, never as the plugin's own constants."""

from __future__ import annotations

import json

import pytest

from driver import names
from driver.cluster import LocalCluster
from driver.devices.catalog import fake_gpu
from driver.devices.rules import parse_rules, resolve
from driver.plugin.mig.modes import apply_modes
from driver.plugin.server import Plugin, PluginConfig
from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    ClaimRecord,
    DeviceRecord,
    MigRecord,
    claim_from_json,
    claim_to_json,
)


class _Switch:
    """NVML's MIG mode switch, applying each change at once."""

    def set_mig_mode(self, uuid: str, enabled: bool) -> tuple[bool, bool | None]:
        return enabled, None


def _plugin(tmp_path) -> Plugin:
    plugin = Plugin(
        PluginConfig("node-a", plugin_dir=tmp_path, claim_status=False), LocalCluster(), [], None, None
    )
    gpus = [fake_gpu("A100-80GB", i, "node-a", mig_enabled=False) for i in range(2)]
    # As the flag's value arrives: a string built at run time, its strategies slices of it.
    text = ",".join(["0=mig", names.STRATEGY_SOFT])
    desired = {i: r.strategy for i, r in resolve(gpus, parse_rules(text)).items()}
    _, plugin.modes = apply_modes(gpus, desired, _Switch())
    assert {i: m.effective for i, m in plugin.modes.items()} == {
        0: names.STRATEGY_MIG,
        1: names.STRATEGY_SOFT,
    }
    return plugin


def _from_checkpoint(device: DeviceRecord) -> ClaimRecord:
    """The claim's record as a restarted plugin holds it: written to the checkpoint's JSON, read back."""
    record = ClaimRecord("u", "ns", "c", STATE_COMPLETED, [device])
    return claim_from_json("u", json.loads(json.dumps(claim_to_json(record))))


@pytest.mark.parametrize(
    ("gpu", "device_type", "wakes"),
    [
        (0, names.TYPE_GPU, True),  # the MIG GPU used whole: it can go back to MIG mode at once
        (1, names.TYPE_GPU, False),  # a soft GPU used whole: nothing waits for it
        (0, names.TYPE_MIG, False),  # a MIG instance of the MIG GPU: its mode does not change
    ],
)
def test_an_unprepare_after_a_restart_publishes_at_once_only_for_a_mig_gpu_used_whole(
    tmp_path, gpu: int, device_type: str, wakes: bool
) -> None:
    plugin = _plugin(tmp_path)
    uuid = plugin.modes[gpu].uuid
    mig = MigRecord(uuid, "1g.10gb", 0, 1, f"MIG-{uuid}", 0) if device_type == names.TYPE_MIG else None
    record = _from_checkpoint(DeviceRecord(["r"], "p", "d", None, [], device_type, uuid, mig))
    plugin._after_unprepare(record)
    assert plugin._wake.is_set() is wakes
