"""Properties of the planner over random clusters (hypothesis): no GPU with an allocated claim changes."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.partitioning import allocated, claim, mig, node_slices, plan, soft, whole

from driver.allocator import Unallocatable
from driver.controller.nodes import claim_devices, device_gpus

MODELS = ("A100-80GB", "A30", "T4")
STRATEGIES = ("exclusive", "soft", "mig", "timeslice", "slots")
PENDING = (mig("1g.10gb"), mig("3g.40gb"), mig("2g.12gb"), whole(1), whole(2), soft("8Gi", "30"))
HELD = (soft("4Gi", "20"), soft("30Gi", "60"), whole(1), mig("1g.10gb"))


@st.composite
def clusters(draw):
    slices, claims = [], []
    for n in range(draw(st.integers(1, 3))):
        model = draw(st.sampled_from(MODELS))
        count = draw(st.integers(1, 3))
        chosen = {i: draw(st.sampled_from(STRATEGIES)) for i in range(count)}
        if model == "T4":
            chosen = {i: s if s != "mig" else "soft" for i, s in chosen.items()}
        node = f"n{n}"
        mine = node_slices(node, f"{count}x{model}", chosen)
        slices += mine
        held: list[dict] = []
        for spec in draw(st.lists(st.sampled_from(HELD), max_size=3)):
            with contextlib.suppress(Unallocatable):
                held.append(allocated(claim(spec), mine, node, held))
        claims += held
    claims += [claim(spec) for spec in draw(st.lists(st.sampled_from(PENDING), min_size=1, max_size=4))]
    return slices, claims


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_change_ever_touches_a_gpu_with_an_allocated_claim(cluster) -> None:
    slices, claims = cluster
    gpu_of = {(s["spec"]["nodeName"], d): u for s in slices for d, u in device_gpus([s]).items()}
    busy = {gpu_of[(pool, device)] for c in claims for pool, device in claim_devices(c)}
    p = plan(slices, claims)
    assert not {c.uuid for c in p.changes} & busy
    for c in p.changes:
        assert c.from_strategy != c.to_strategy
