"""Small clusters and traces for the simulator tests, written out by hand (imported by module name,
never through a conftest: another conftest module may be found first)."""

from __future__ import annotations

from typing import Any

from driver.simulate.inputs import NodeGroup, TracePod


def whole_gpus(count: int = 1) -> dict[str, Any]:
    return {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.carve.dev", "count": count}}]}}


def soft(memory: str, cores: str) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "vgpu.carve.dev", "capacity": {"requests": {"memory": memory, "cores": cores}}}}]}}


def soft_or_whole(memory: str, cores: str) -> dict[str, Any]:
    """A soft slice where the node has soft GPUs, else a whole GPU."""
    return {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
        {"name": "soft", "deviceClassName": "vgpu.carve.dev",
         "capacity": {"requests": {"memory": memory, "cores": cores}}},
        {"name": "whole", "deviceClassName": "gpu.carve.dev"}]}]}}


def pod(name: str, arrival: float, duration: float, *claims: dict[str, Any]) -> TracePod:
    return TracePod(name, arrival, duration, tuple(claims) or (whole_gpus(),))


def nodes(name: str, count: int, gpus: str, strategy: str | None = None) -> NodeGroup:
    n, model = gpus.split("x", 1)
    return NodeGroup(name, count, (model,) * int(n), strategy)
