"""Placement of soft slices among a node's GPUs (driver/allocator/placement.py): binpack, spread, and the
scheduler's own first fit when unset."""

from __future__ import annotations

import pytest
from allocator_fixtures import DRIVER, claim, dev, devices_of, exactly, klass, slice_

from driver.allocator import Allocator
from driver.allocator.placement import placement_for, reorder


def slice_config(**fields):
    params = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "SliceConfig", **fields}
    return {"opaque": {"driver": DRIVER, "parameters": params}}


def node_of_three_soft_gpus():
    gpus = [dev(f"gpu-{i}-soft", "vgpu", uuid=f"GPU-{i}", memory="40Gi", multi=True) for i in range(3)]
    return [slice_("n1", gpus)]


def run(placement_cfg, claim_cfg=None, sizes=("10Gi",) * 4, pinned=None):
    """Allocate soft slices one after another, recording each; the devices they got, in order.
    `pinned`: a first claim held on that device (by selector) before the others."""
    classes = [klass("vgpu", config=[slice_config(placement=placement_cfg)] if placement_cfg else None)]
    a = Allocator(node_of_three_soft_gpus(), classes)
    out = []
    claims = []
    if pinned:
        sel = f'device.attributes["{DRIVER}"].uuid == "{pinned}"'
        claims.append(claim("pinned", exactly("gpu", "vgpu", capacity={"memory": "10Gi"}, selectors=[sel])))
    cfg = [slice_config(placement=claim_cfg)] if claim_cfg else None
    claims += [
        claim(f"c{i}", exactly("gpu", "vgpu", capacity={"memory": m}), config=cfg, uid=f"u{i}")
        for i, m in enumerate(sizes)
    ]
    for c in claims:
        alloc = a.allocate(c, "n1")
        c["status"] = {"allocation": alloc}
        a.add_allocated(c)
        out.append(devices_of(alloc)[0][2])
    return out


def test_unset_is_the_schedulers_first_fit_in_published_order():
    assert run(None) == ["gpu-0-soft"] * 4


def test_spread_puts_each_slice_on_the_least_used_gpu():
    assert run("spread") == ["gpu-0-soft", "gpu-1-soft", "gpu-2-soft", "gpu-0-soft"]


def test_binpack_fills_the_most_used_gpu_first_not_the_first_listed():
    # gpu-2 holds a slice already: binpack goes there until it is full, first fit would start at gpu-0.
    got = run("binpack", sizes=("10Gi", "10Gi", "10Gi", "10Gi"), pinned="GPU-2")
    assert got == ["gpu-2-soft", "gpu-2-soft", "gpu-2-soft", "gpu-2-soft", "gpu-0-soft"]
    assert run(None, pinned="GPU-2")[1:] == ["gpu-0-soft"] * 4


def test_a_claims_placement_applies_when_its_class_sets_none_and_the_class_wins_otherwise():
    assert run(None, claim_cfg="spread")[:3] == ["gpu-0-soft", "gpu-1-soft", "gpu-2-soft"]
    assert run("binpack", claim_cfg="spread") == ["gpu-0-soft"] * 4


OTHER = {"kind": "SliceConfig", "placement": "spread"}


@pytest.mark.parametrize(
    "class_cfg, claim_cfg, want",
    [
        ([], [], None),
        ([slice_config(placement="spread")], [], "spread"),
        ([], [{**slice_config(placement="binpack"), "requests": ["other"]}], None),
        ([], [{**slice_config(placement="binpack"), "requests": ["gpu"]}], "binpack"),
        # the last entry names another request: the earlier one for this request still applies
        (
            [],
            [
                {**slice_config(placement="binpack"), "requests": ["gpu"]},
                {**slice_config(placement="spread"), "requests": ["other"]},
            ],
            "binpack",
        ),
        ([slice_config(placement="nonsense")], [], None),
        ([{"opaque": {"driver": "other.example.com", "parameters": OTHER}}], [], None),
    ],
)
def test_placement_for_reads_carves_own_slice_config_only(class_cfg, claim_cfg, want):
    assert placement_for("gpu", class_cfg, claim_cfg) == want


def test_reorder_moves_only_the_shareable_candidates():
    load = {"a": None, "b": 0.5, "c": None, "d": 0.1, "e": 0.9}
    order = list("abcde")
    assert reorder(order, "spread", load.get) == list("adcbe")
    assert reorder(order, "binpack", load.get) == list("aecbd")
    assert reorder(order, None, load.get) == order
