"""Nodes, claims and plans for the controller's tests: slices built by the real device model, claims
allocated by the real allocator."""

from __future__ import annotations

import itertools
from typing import Any

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver import names
from driver.allocator import Allocator
from driver.controller.inputs import build_input
from driver.controller.planner import Plan, PlanInput, Planner
from driver.devices import build_slices
from driver.devices.catalog import fake_node
from driver.simulate.cluster import device_classes

CREATED = "2026-01-01T00:00:00Z"
DOMAIN = names.DRIVER_NAME
NOW = 1767225600.0 + 3600  # one hour after CREATED
_uids = itertools.count()


def node_slices(node: str, spec: str, strategies: dict[int, str] | str) -> list[dict[str, Any]]:
    gpus = fake_node(spec, node)
    chosen = strategies if isinstance(strategies, dict) else {g.index: strategies for g in gpus}
    return build_slices(node, gpus, chosen, k8s_version="1.36")


def claim(
    spec: dict[str, Any], name: str | None = None, namespace: str = "ns", created: str = CREATED
) -> dict[str, Any]:
    n = next(_uids)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name or f"c{n}",
            "namespace": namespace,
            "uid": f"uid-{n}",
            "creationTimestamp": created,
        },
        "spec": spec,
    }


def mig(profile: str = "3g.40gb") -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "g",
                    "exactly": {
                        "deviceClassName": names.CLASS_MIG,
                        "selectors": [
                            {
                                "cel": {
                                    "expression": f'device.attributes["{DOMAIN}"].profile == "{profile}"'
                                }
                            }
                        ],
                    },
                }
            ]
        }
    }


def whole(count: int = 1) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [{"name": "g", "exactly": {"deviceClassName": names.CLASS_GPU, "count": count}}]
        }
    }


def soft(memory: str = "4Gi", cores: str = "20") -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "g",
                    "exactly": {
                        "deviceClassName": names.CLASS_VGPU,
                        "capacity": {"requests": {"memory": memory, "cores": cores}},
                    },
                }
            ]
        }
    }


def soft_or_whole(memory: str = "4Gi", cores: str = "20") -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "g",
                    "firstAvailable": [
                        {
                            "name": "soft",
                            "deviceClassName": names.CLASS_VGPU,
                            "capacity": {"requests": {"memory": memory, "cores": cores}},
                        },
                        {"name": "whole", "deviceClassName": names.CLASS_GPU},
                    ],
                }
            ]
        }
    }


def allocated(
    c: dict[str, Any], slices: list[dict[str, Any]], node: str, others: list[dict[str, Any]] = ()
) -> dict[str, Any]:
    """The claim with the allocation the allocator gives it on `node`, after `others`."""
    a = Allocator(slices, device_classes())
    for o in others:
        a.add_allocated(o)
    return {**c, "status": {"allocation": a.allocate(c, node=node)}}


def plan(
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    policy: PartitioningPolicySpec | None = None,
    partitionings: dict[str, dict[str, Any]] | None = None,
    now: float = NOW,
    isolated: frozenset[str] = frozenset(),
    labels: dict[str, dict[str, str]] | None = None,
    grace_s: float = 0.0,
    planner: Planner | None = None,
) -> Plan:
    inp = plan_input(slices, claims, policy, partitionings, now, isolated, labels, grace_s)
    return (planner or Planner()).plan(inp)


def plan_input(
    slices, claims, policy=None, partitionings=None, now=NOW, isolated=frozenset(), labels=None, grace_s=0.0
) -> PlanInput:
    inp, problems = build_input(
        slices,
        device_classes(),
        claims,
        partitionings or {},
        policy or PartitioningPolicySpec(),
        now,
        labels,
        isolated,
        grace_s=grace_s,
    )
    assert not problems, problems
    return inp


def policy(**spec: Any) -> PartitioningPolicySpec:
    return PartitioningPolicySpec.model_validate(spec)
