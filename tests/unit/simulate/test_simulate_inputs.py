"""cluster.yaml and trace.yaml: what they accept, and errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.simulate.cluster import build_cluster
from driver.simulate.inputs import (
    GenerateModel,
    NodeGroup,
    SimulateError,
    cluster_from_data,
    load_cluster,
    load_trace,
    trace_from_data,
)

REPO = Path(__file__).resolve().parents[3]
CLAIM = {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.carve.dev"}}]}}


def test_cluster_groups_expand_gpu_lists() -> None:
    (group,) = cluster_from_data({"nodes": [{"name": "a", "count": 3, "gpus": "2xA100-80GB,1xT4"}]})
    assert (group.name, group.count, group.strategy) == ("a", 3, None)
    assert group.models == ("A100-80GB", "A100-80GB", "T4")


def test_cluster_nodes_are_named_after_their_group() -> None:
    groups = cluster_from_data({"nodes": [{"name": "a", "count": 2, "gpus": "1xT4"},
                                          {"name": "b", "gpus": "1xT4"}]})
    assert [n.name for n in build_cluster(groups).nodes] == ["a-0", "a-1", "b"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"nodes": [{"name": "a", "gpus": "8A100"}]},
         "cluster.yaml: nodes[0].gpus: '8A100' is not <count>x<model>"),
        ({"nodes": [{"name": "a", "gpus": "1xT4", "strategy": "fast"}]}, "cluster.yaml: nodes[0].strategy:"),
        ({"nodes": [{"name": "a", "gpus": "1xT4", "cnt": 2}]}, "cluster.yaml: nodes[0].cnt: Extra inputs"),
        ({"nodes": [{"gpus": "1xT4"}]}, "cluster.yaml: nodes[0].name: Field required"),
        ({"nodes": [{"name": "a", "gpus": "1xT4"}, {"name": "a", "gpus": "1xT4"}]}, "'a' is used twice"),
        ({"nodes": []}, "cluster.yaml: nodes: List should have at least 1 item"),
    ],
)
def test_bad_cluster_fields_are_named(data: dict, message: str) -> None:
    with pytest.raises(SimulateError) as err:
        cluster_from_data(data)
    assert message in str(err.value)


def test_unknown_gpu_model_names_the_field() -> None:
    groups = cluster_from_data({"nodes": [{"name": "ok", "gpus": "1xT4"}, {"name": "a", "gpus": "2xV100"}]})
    with pytest.raises(SimulateError, match=r"cluster.yaml: nodes\[1\].gpus: .*V100"):
        build_cluster(groups)


def test_mig_on_a_gpu_without_mig_names_the_strategy_field() -> None:
    groups = cluster_from_data({"nodes": [{"name": "a", "gpus": "1xT4", "strategy": "mig"}]})
    with pytest.raises(SimulateError, match=r"cluster.yaml: nodes\[0\].strategy: .*no MIG support"):
        build_cluster(groups)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"pods": [{"name": "p", "arrival": 0, "claims": [CLAIM]}]},
         "trace.yaml: pods[0].duration: Field required"),
        ({"pods": [{"name": "p", "arrival": -1, "duration": 1, "claims": [CLAIM]}]},
         "pods[0].arrival: Input should"),
        ({"pods": [{"name": "p", "arrival": 0, "duration": 1, "claims": [{"devices": {}}]}]},
         "pods[0].claims: Value error, claims[0]: a ResourceClaim spec needs devices.requests"),
        ({"pods": [{"name": "p", "arrival": 0, "duration": 1, "claims": [
            {"devices": {"requests": [{"name": "g"}]}}]}]}, "needs exactly one of exactly, firstAvailable"),
        ({"pods": [{"name": "p", "arrival": 0, "duration": 1, "claims": [CLAIM],
                    "demand": {"memory": "4Gx"}}]},
         "pods[0].demand.memory:"),
        ({"generate": {"kind": "batch", "pods": 3}}, "trace.yaml: generate.kind:"),
        ({}, "give exactly one of pods, generate"),
        ({"pods": [], "generate": {"pods": 1}}, "give exactly one of pods, generate"),
    ],
)
def test_bad_trace_fields_are_named(data: dict, message: str) -> None:
    with pytest.raises(SimulateError) as err:
        trace_from_data(data)
    assert message.replace("Value error, ", "") in str(err.value)


def test_trace_demand_is_read_as_a_quantity() -> None:
    (pod,) = trace_from_data({"pods": [{"name": "p", "arrival": 0, "duration": 1, "claims": [CLAIM],
                                        "demand": {"memory": "4Gi", "cores": 25}}]})
    assert (pod.demand.memory, pod.demand.cores) == (4 * 1024**3, 25.0)


def test_files_are_named_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "my-cluster.yaml"
    path.write_text("nodes: [{name: a, gpus: 'x'}]\n")
    with pytest.raises(SimulateError, match=r"^my-cluster.yaml: nodes\[0\].gpus"):
        load_cluster(path)
    path.write_text("nodes: [\n")
    with pytest.raises(SimulateError, match=r"my-cluster\.yaml:2:1: invalid YAML"):
        load_cluster(path)
    with pytest.raises(SimulateError, match="cannot read"):
        load_cluster(tmp_path / "missing.yaml")


def test_shipped_example_files_load() -> None:
    examples = REPO / "deviceclasses" / "examples" / "simulate"
    # the values written in the example files, read back field by field
    assert load_cluster(examples / "cluster.yaml") == [
        NodeGroup("a100", 6, ("A100-80GB",) * 8, None), NodeGroup("l4", 2, ("L4",) * 4, "soft")
    ]
    assert load_trace(examples / "trace.yaml") == GenerateModel(
        kind="inference-mix", pods=2000, seed=7, interarrival_s=600
    )
    pods = load_trace(examples / "trace-pods.yaml")
    assert [(p.name, p.arrival, p.duration) for p in pods] == [
        ("llm-server", 0, 7200), ("notebook", 60, 14400), ("finetune", 120, 3600)
    ]
    first = pods[0].claims[0]["devices"]["requests"][0]["firstAvailable"]
    assert [(alt["name"], alt["deviceClassName"]) for alt in first] == [
        ("mig", "mig.carve.dev"), ("soft", "vgpu.carve.dev"), ("gpu", "gpu.carve.dev")
    ]
    assert sorted(p.name for p in examples.glob("trace*.yaml")) == ["trace-pods.yaml", "trace.yaml"]
