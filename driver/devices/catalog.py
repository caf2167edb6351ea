"""Gpu records of emulated models, for tests and simulations that run without NVML.

The models are the ones the fake libnvidia-ml.so.1 emulates (native/fakes), with the values of
shared/reference/mig-profiles.json, kept in catalog.json next to this module. This is test and
simulation data: the driver's production path reads every GPU, MIG tables included, through NVML.

    from driver.devices.catalog import fake_gpu, fake_node
    gpus = fake_node("2xA100-80GB,1xT4", node_name="n1")
    slices = build_slices("n1", gpus, {0: "mig", 1: "soft", 2: "exclusive"})
"""

from __future__ import annotations

import json
import re
import uuid
from functools import cache
from importlib import resources
from typing import Any

from driver.devices.base import MI, ModelError
from driver.gpu.model import Gpu, MigPlacement, MigProfile

DEFAULT_DRIVER_VERSION = "580.95.05"
DEFAULT_CUDA_VERSION = "13.0"
_TOKEN = re.compile(r"^(?:(\d+)x)?(.+)$")


@cache
def _catalog() -> dict[str, dict[str, Any]]:
    data = json.loads(resources.files("driver.devices").joinpath("catalog.json").read_text())
    return {m["key"].lower(): m for m in data["models"]}


def models() -> list[str]:
    """The model keys, as written in CARVE_FAKE_GPUS ("A100-80GB", "T4", ...)."""
    return [m["key"] for m in _catalog().values()]


def model(key: str) -> dict[str, Any]:
    try:
        return _catalog()[key.strip().lower()]
    except KeyError:
        raise ModelError(f"unknown GPU model {key!r}; one of {', '.join(models())}") from None


@cache
def _by_product() -> dict[str, str]:
    return {m["product"]: m["key"] for m in _catalog().values()}


def key_for_product(product: str) -> str | None:
    """The model key of a productName as NVML (and a ResourceSlice attribute) spells it, or None."""
    return _by_product().get(product)


def _profile(p: dict[str, Any]) -> MigProfile:
    return MigProfile(
        id=p["id"],
        index=p["index"],
        name=p["name"],
        compute_slices=p["compute_slices"],
        memory_bytes=p["memory_mib"] * MI,
        multiprocessors=p["multiprocessors"],
        copy_engines=p["copy_engines"],
        decoders=p["decoders"],
        encoders=p["encoders"],
        jpegs=p["jpegs"],
        ofas=p["ofas"],
        max_instances=p["max_instances"],
        placements=tuple(MigPlacement(start, size) for start, size in p["placements"]),
    )


def fake_gpu(
    model_key: str,
    index: int = 0,
    node_name: str = "node",
    *,
    mig_enabled: bool | None = None,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    cuda_driver_version: str = DEFAULT_CUDA_VERSION,
) -> Gpu:
    """A Gpu record for one emulated GPU; UUID and PCI bus id are deterministic in (node_name, index).

    mig_enabled defaults to the model's MIG capability. The UUIDs differ from the fake NVML library's
    (both are deterministic, from different hashes); compare models, not identities.
    """
    m = model(model_key)
    profiles = tuple(_profile(p) for p in m["mig_profiles"])
    ident = uuid.uuid5(uuid.NAMESPACE_DNS, f"{node_name}/gpu/{index}")
    return Gpu(
        uuid=f"GPU-{ident}",
        index=index,
        minor=index,
        product=m["product"],
        memory_bytes=m["memory_mib"] * MI,
        multiprocessors=m["multiprocessors"],
        architecture=m["architecture"],
        cuda_compute_capability=m["compute_capability"],
        driver_version=driver_version,
        cuda_driver_version=cuda_driver_version,
        pci_bus_id=f"0000:{(0x10 + 8 * index) % 0x100:02x}:00.0",
        mig_capable=bool(profiles),
        mig_enabled=bool(profiles) if mig_enabled is None else mig_enabled,
        mig_profiles=profiles,
    )


# GPUs one fake node may have: the fake NVML's own table (native/fakes/common: FAKE_MAX_GPUS).
MAX_FAKE_GPUS = 16


def parse_fake_spec(spec: str) -> list[str]:
    """'2xA100-80GB,1xT4' -> ['A100-80GB', 'A100-80GB', 'T4'] (canonical keys); ModelError names the token."""
    keys: list[str] = []
    for token in (t.strip() for t in (spec or "").split(",")):
        m = _TOKEN.match(token)
        if not token or not m:
            raise ModelError(f"fake GPU spec {spec!r}: empty item; expected e.g. 2xA100-80GB,1xT4")
        count = int(m.group(1) or 1)
        if count < 1:
            raise ModelError(f"fake GPU spec {spec!r}: {token!r}: count must be at least 1")
        if len(keys) + count > MAX_FAKE_GPUS:
            # Checked before the list is built: `99999999999999999999xT4` must be an error, not a MemoryError.
            raise ModelError(f"fake GPU spec {spec!r}: more than {MAX_FAKE_GPUS} GPUs on one node")
        try:
            key = model(m.group(2))["key"]
        except ModelError as e:
            raise ModelError(f"fake GPU spec {spec!r}: {token!r}: {e}") from None
        keys.extend([key] * count)
    return keys


def fake_node(spec: str, node_name: str = "node") -> list[Gpu]:
    """All GPUs of a fake node: fake_node('2xA100-80GB,1xT4', 'n1') -> three Gpu records, indices 0..2."""
    return [fake_gpu(key, i, node_name) for i, key in enumerate(parse_fake_spec(spec))]
