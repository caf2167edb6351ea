"""Who set each GPU's strategy (NodePartitioning status, `sources`) after a restart with no NodePartitioning:
the strategies last applied stay, and a GPU the controller had moved off the flag's strategy says so."""

from driver.cluster.base import NotFound
from driver.plugin.mig.partitioning import NodePartitioningApplier
from driver.plugin.mig.partitioning_state import APPLIED, ChangeRecord, write_record


class _NoPartitioning:
    def get_object(self, plural, name):
        raise NotFound(f"{plural} {name} not found")


def _applier(tmp_path):
    return NodePartitioningApplier(_NoPartitioning(), "n1", tmp_path, list, lambda s: {}, lambda: None, dict)


def test_without_a_node_partitioning_the_controllers_last_choice_is_named_as_the_controllers(tmp_path):
    write_record(tmp_path, ChangeRecord(3, {0: "mig", 1: "soft", 2: "exclusive"}, {}, APPLIED))
    applier = _applier(tmp_path)
    flag = {0: "soft", 1: "soft", 2: "soft"}
    got = applier.start_strategies(flag, sources={0: "default", 1: "fallback", 2: "default"})
    assert got == {0: "mig", 1: "soft", 2: "exclusive"}
    assert applier.sources == {0: "controller", 1: "fallback", 2: "controller"}
