"""The NodePartitioning / PartitioningPolicy CRDs agree with the pydantic models: same enums, the same
objects accepted (OpenAPI schema + the CEL rules, evaluated with cel-python) and the same rejected."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml

from api.v1alpha1.partitioning import (
    STRATEGY_NAMES,
    PartitioningError,
    parse_node_partitioning,
    parse_policy,
)

CRDS = Path(__file__).resolve().parents[3] / "helm" / "carve" / "crds"


def _schema(name: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / f"{name}.carve.dev.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def _cel_failures(schema: dict[str, Any], value: Any) -> list[str]:
    """Messages of the x-kubernetes-validations rules that do not hold, at every level of `value`."""
    out: list[str] = []
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations") or []:
        program = env.program(env.compile(rule["rule"]))
        if not program.evaluate({"self": celpy.json_to_cel(value)}):
            out.append(rule["message"])
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                out += _cel_failures(sub, value[key])
    if isinstance(value, list) and "items" in schema:
        for item in value:
            out += _cel_failures(schema["items"], item)
    return out


def _admitted(name: str, obj: dict[str, Any]) -> list[str]:
    """What the API server would say: schema errors, then CEL rule messages."""
    schema = _schema(name)
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]
    return errors or _cel_failures(schema, obj)


GOOD_NP = {
    "apiVersion": "carve.dev/v1alpha1",
    "kind": "NodePartitioning",
    "metadata": {"name": "node-a"},
    "spec": {
        "gpus": [
            {"index": 0, "strategy": "mig", "migLayout": [{"profile": "3g.40gb", "placement": 0}]},
            {"uuid": "GPU-1", "strategy": "soft", "splitCount": 8},
        ]
    },
    "status": {
        "observedGeneration": 3,
        "gpus": [
            {
                "index": 0,
                "strategy": "soft",
                "migMode": "Disabled",
                "pending": "waiting for claim ns/a to end",
            }
        ],
        "conditions": [
            {
                "type": "Applied",
                "status": "False",
                "reason": "WaitingForIdleGPU",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    },
}


def test_strategy_enums_are_the_models_strategies() -> None:
    np, pol = _schema("nodepartitionings"), _schema("partitioningpolicies")
    gpu = np["properties"]["spec"]["properties"]["gpus"]["items"]["properties"]
    rule = pol["properties"]["spec"]["properties"]["nodes"]["items"]["properties"]
    assert tuple(gpu["strategy"]["enum"]) == STRATEGY_NAMES
    assert tuple(rule["allowedStrategies"]["items"]["enum"]) == STRATEGY_NAMES
    assert tuple(rule["defaultStrategy"]["enum"]) == STRATEGY_NAMES


def test_a_valid_node_partitioning_passes_schema_rules_and_model() -> None:
    assert _admitted("nodepartitionings", GOOD_NP) == []
    parsed = parse_node_partitioning(GOOD_NP)
    assert parsed.desired()[0].mig_layout[0].profile == "3g.40gb"
    assert parsed.status.gpus[0].pending.startswith("waiting")


@pytest.mark.parametrize(
    ("change", "message", "field"),
    [
        (
            lambda s: s["gpus"].append({"index": 0, "strategy": "soft"}),
            "a GPU index is named twice",
            "spec: .*index is named twice",
        ),
        (
            lambda s: s["gpus"][1].update(uuid=None) or s["gpus"][1].pop("uuid"),
            "each GPU is named by its index or its uuid",
            "spec.gpus.1",
        ),
        (
            lambda s: s["gpus"][1].update(migLayout=[{"profile": "1g.10gb"}]),
            "migLayout is only valid with strategy mig",
            "spec.gpus.1",
        ),
        (
            lambda s: s["gpus"][0].update(splitCount=4),
            "splitCount is only valid with strategy soft or slots",
            "spec.gpus.0",
        ),
    ],
)
def test_cel_rules_and_the_model_reject_the_same_objects(change, message, field) -> None:
    obj = copy.deepcopy(GOOD_NP)
    change(obj["spec"])
    assert _admitted("nodepartitionings", obj) == [message]
    with pytest.raises(PartitioningError, match=f"NodePartitioning node-a: {field}"):
        parse_node_partitioning(obj)


def test_an_unknown_strategy_is_refused_by_schema_and_model() -> None:
    obj = copy.deepcopy(GOOD_NP)
    obj["spec"]["gpus"][0] = {"index": 0, "strategy": "fastest"}
    assert any("fastest" in e for e in _admitted("nodepartitionings", obj))
    with pytest.raises(PartitioningError, match=r"spec\.gpus\.0\.strategy"):
        parse_node_partitioning(obj)


def test_a_policy_default_must_be_allowed_in_crd_and_model() -> None:
    obj = {
        "metadata": {"name": "default"},
        "spec": {
            "nodes": [{"allowedStrategies": ["mig"], "defaultStrategy": "soft"}],
            "hysteresis": {"minHold": "15m", "maxChangesPerHour": 4},
        },
    }
    assert _admitted("partitioningpolicies", obj) == ["defaultStrategy must be one of allowedStrategies"]
    with pytest.raises(PartitioningError, match=r"PartitioningPolicy default: spec\.nodes\.0"):
        parse_policy(obj)
    obj["spec"]["nodes"][0]["defaultStrategy"] = "mig"
    assert _admitted("partitioningpolicies", obj) == []
    assert parse_policy(obj).hysteresis.min_hold_s == 900


def test_a_bad_min_hold_is_refused_by_schema_and_model() -> None:
    obj = {"metadata": {"name": "p"}, "spec": {"hysteresis": {"minHold": "ten minutes"}}}
    assert _admitted("partitioningpolicies", obj)
    with pytest.raises(PartitioningError, match=r"spec\.hysteresis\.minHold"):
        parse_policy(obj)


def test_label_selectors_match_like_kubernetes() -> None:
    rule = parse_policy(
        {
            "spec": {
                "nodes": [
                    {
                        "nodeSelector": {
                            "matchLabels": {"gpu": "a100"},
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                                {"key": "drain", "operator": "DoesNotExist"},
                            ],
                        },
                        "allowedStrategies": ["mig"],
                        "defaultStrategy": "mig",
                    }
                ]
            }
        }
    )
    assert rule.rule_for({"gpu": "a100", "zone": "a"}) is not None
    assert rule.rule_for({"gpu": "a100", "zone": "c"}) is None
    assert rule.rule_for({"gpu": "a100", "zone": "a", "drain": "1"}) is None
    assert rule.rule_for({"zone": "a"}) is None
