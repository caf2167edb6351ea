"""A NodePartitioning status whose only change is a condition's message (a new problem with the spec while the
node stays Degraded, the GPUs as they were) is written (driver/plugin/mig/partitioning.py, `published`): the
status is compared without its timestamps, not without its conditions, so the admin reads the problem of
the spec as it is now, not the one before it."""

from __future__ import annotations

from driver import names
from driver.cluster import LocalCluster
from driver.devices.catalog import fake_gpu
from driver.plugin.mig.modes import GpuMode
from driver.plugin.mig.partitioning import PLURAL, NodePartitioningApplier

NODE = "node-a"


def _degraded(cluster: LocalCluster) -> dict:
    status = cluster.get_object(PLURAL, NODE)["status"]
    return next(c for c in status["conditions"] if c["type"] == "Degraded")


def test_a_new_problem_alone_is_written_to_the_status(tmp_path) -> None:
    cluster = LocalCluster()
    cluster.create_object(
        PLURAL,
        {
            "apiVersion": "carve.dev/v1alpha1",
            "kind": "NodePartitioning",
            "metadata": {"name": NODE},
            "spec": {"gpus": []},
        },
    )
    gpus = [fake_gpu("A100-80GB", 0, NODE, mig_enabled=False)]
    soft = names.STRATEGY_SOFT
    modes = {0: GpuMode(0, gpus[0].uuid, soft, soft, soft, False)}
    applier = NodePartitioningApplier(
        cluster, NODE, tmp_path, lambda: gpus, lambda w: {}, lambda: None, lambda: modes
    )
    applier.exists = True
    applier.problems = ["spec.gpus[0].index: GPU 7 is not on this node"]
    applier.published()
    first = _degraded(cluster)
    assert (first["status"], first["message"]) == ("True", "spec.gpus[0].index: GPU 7 is not on this node")
    applier.problems = ["spec.gpus[0].index: GPU 8 is not on this node"]
    applier.published()
    second = _degraded(cluster)
    assert (second["status"], second["message"]) == ("True", "spec.gpus[0].index: GPU 8 is not on this node")
    assert second["lastTransitionTime"] == first["lastTransitionTime"]  # still Degraded: the same transition
