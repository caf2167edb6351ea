"""With DRAConsumableCapacity off, every strategy that falls back is announced with what it became: an mps GPU
becomes slots and a time-sliced one a whole GPU, as a soft one becomes slots (the announcement is how the
operator learns the node is not what its flags asked for; docs/plugin.md, "Publishing")."""

from __future__ import annotations

from driver.cluster import LocalCluster, fields_of_disabled_gates
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_node
from driver.plugin.publisher import GATE_CONSUMABLE, Publisher

NODE = "node-a"


def test_an_mps_and_a_timesliced_gpu_falling_back_are_both_announced():
    gpus = fake_node("2xA100-80GB,1xT4", NODE)
    cluster = LocalCluster(drop_fields=fields_of_disabled_gates([GATE_CONSUMABLE]))
    pub = Publisher(
        cluster,
        NODE,
        lambda s, g: build_slices(NODE, gpus, s, Settings(), "1.36", g),
        {0: "mps", 1: "timeslice", 2: "exclusive"},
        sleep=lambda _s: None,
    )
    told: list[tuple[set[str], dict[int, str]]] = []
    pub.on_gates_off = lambda gates, changed: told.append((gates, changed))
    pub.publish()
    assert pub.effective == {0: "slots", 1: "exclusive", 2: "exclusive"}
    assert told == [({GATE_CONSUMABLE}, {0: "mps->slots", 1: "timeslice->exclusive"})]
