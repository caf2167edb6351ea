"""The pruned search returns exactly what the unpruned one does, and fails far sooner on full nodes."""

import contextlib

from allocator_fixtures import CLASSES, claim, dev, exactly, slice_
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.allocator import Allocator, Unallocatable

POLICY = {"validRange": {"min": "1Gi", "step": "1Gi"}}
PARENTS = ("A", "B", "C")


@st.composite
def nodes(draw):
    """A node with look-alike devices (so the equivalence rule fires) and a few that differ."""
    devices, counters = [], []
    for i in range(draw(st.integers(0, 6))):
        tainted = draw(st.integers(0, 9)) == 0
        devices.append(dev(f"g{i}", parentUUID=draw(st.sampled_from(PARENTS)),
                           memory=draw(st.sampled_from(["16Gi", "16Gi", "32Gi"])),
                           taints=[{"key": "t", "effect": "NoSchedule"}] if tainted else None))
    for i in range(draw(st.integers(0, 5))):
        devices.append(dev(f"v{i}", "vgpu", parentUUID=draw(st.sampled_from(PARENTS)),
                           memory=draw(st.sampled_from(["8Gi", "8Gi", "12Gi"])), multi=True, policy=POLICY))
    if draw(st.booleans()):
        counters.append({"name": "set", "counters": {"slices": {"value": "4"}}})
        for k, size in enumerate(draw(st.lists(st.sampled_from([1, 1, 2]), max_size=5))):
            devices.append(dev(f"m{k}", "mig", parentUUID="A", consumes=[
                {"counterSet": "set", "counters": {"slices": {"value": str(size)}}}]))
    return [slice_("a", devices, counters=counters or None)]


def request(name):
    return st.one_of(
        st.builds(lambda n: exactly(name, cls="gpu", count=n), st.integers(1, 3)),
        st.builds(lambda m: exactly(name, cls="vgpu", capacity={"memory": f"{m}Gi"}), st.integers(1, 9)),
        st.builds(lambda n: exactly(name, cls="mig", count=n), st.integers(1, 2)),
        st.just({"name": name, "firstAvailable": [{"name": "m", "deviceClassName": "mig", "count": 2},
                                                  {"name": "g", "deviceClassName": "gpu"}]}),
    )


@st.composite
def claims(draw, name):
    # Repeating one request shape makes twins; a constraint may cover all requests or only the first.
    shape = draw(st.integers(1, 4))
    first = draw(request("r0"))
    reqs = [first]
    for j in range(1, shape):
        same = draw(st.booleans())
        reqs.append({**first, "name": f"r{j}"} if same else draw(request(f"r{j}")))
    constraints = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["matchAttribute", "distinctAttribute"]))
        attr = draw(st.sampled_from(["gpu.carve.dev/parentUUID", "gpu.carve.dev/uuid"]))
        only = draw(st.sampled_from([[], ["r0"], ["r1"]] if shape > 1 else [[], ["r0"]]))
        constraints.append({kind: attr, **({"requests": only} if only else {})})
    return claim(name, *reqs, constraints=constraints or None, uid=name)


def outcome(a, c, prune):
    try:
        out = a.allocate(c, prune=prune)
    except Unallocatable as e:
        return ("unallocatable", e.reason)
    return ("allocated", out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), st.lists(claims("held"), max_size=3), claims("asked"))
def test_pruned_search_returns_exactly_the_unpruned_result(slices, held, asked):
    a = Allocator(slices, CLASSES)
    for i, h in enumerate(held):  # earlier claims give devices uneven holdings
        h = {**h, "metadata": {**h["metadata"], "name": f"held{i}", "uid": f"held{i}"}}
        with contextlib.suppress(Unallocatable):
            a.add_allocated({**h, "status": {"allocation": a.allocate(h)}})
    unpruned = outcome(a, asked, prune=False)
    if "gave up after trying" in str(unpruned[1]):
        return  # the unpruned search hit its step budget: nothing to compare against
    assert outcome(a, asked, prune=True) == unpruned


def _slots_node(gpus, per, taken):
    devices = [dev(f"g{g}-s{k}", parentUUID=f"G{g}") for g in range(gpus) for k in range(per)]
    a = Allocator([slice_("a", devices)], CLASSES)
    for g in range(gpus):
        for k in range(taken):
            only = f'device.attributes["gpu.carve.dev"].uuid == "g{g}-s{k}"'
            c = claim(f"t{g}-{k}", exactly("r", selectors=[only]), uid=f"t{g}-{k}")
            a.add_allocated({**c, "status": {"allocation": a.allocate(c)}})
    return a


def _steps(a, c, prune):
    before = a.stats["search_steps"]
    result = outcome(a, c, prune)
    return result, a.stats["search_steps"] - before


def test_pruning_fails_identical_requests_on_a_full_node_without_trying_every_order():
    # Six one-slot requests on one GPU (matchAttribute); every GPU has only five slots free.
    a = _slots_node(8, 10, 5)
    c = claim("c", *[exactly(f"r{j}") for j in range(6)],
              constraints=[{"matchAttribute": "gpu.carve.dev/parentUUID"}])
    (kind, reason), pruned = _steps(a, c, prune=True)
    assert kind == "unallocatable" and "gave up" not in reason
    (_, unpruned_reason), unpruned = _steps(a, c, prune=False)
    assert "gave up after trying" in unpruned_reason  # the unpruned search exhausts its budget
    assert pruned < 2_000 < unpruned


def test_pruning_fails_soft_shares_that_do_not_add_up_in_few_steps():
    devices = [dev(f"v{i}", "vgpu", memory="80Gi", multi=True) for i in range(8)]
    a = Allocator([slice_("a", devices)], CLASSES)
    for i in range(8):  # seven GPUs keep 20Gi free, the last none
        used = "60Gi" if i < 7 else "80Gi"
        only = f'device.attributes["gpu.carve.dev"].uuid == "v{i}"'
        c = claim(f"f{i}", exactly("r", cls="vgpu", capacity={"memory": used}, selectors=[only]), uid=f"f{i}")
        a.add_allocated({**c, "status": {"allocation": a.allocate(c)}})
    c = claim("c", *[exactly(f"r{j}", cls="vgpu", capacity={"memory": "20Gi"}) for j in range(8)])
    (kind, _), pruned = _steps(a, c, prune=True)
    (unpruned_kind, _), unpruned = _steps(a, c, prune=False)
    assert kind == unpruned_kind == "unallocatable"
    assert pruned * 100 < unpruned


def test_cel_errors_surface_as_without_pruning():
    # g1 lacks the attribute the request reads: the unpruned search meets the error after g0 fails.
    slices = [slice_("a", [dev("g0", profile="x"), dev("g1"), dev("g2", profile="x")])]
    a = Allocator(slices, CLASSES)
    sel = ['device.attributes["gpu.carve.dev"].profile == "x"']
    c = claim("c", exactly("r0", selectors=sel), exactly("r1", selectors=sel), exactly("r2", selectors=sel),
              exactly("r3", selectors=sel))
    assert outcome(a, c, prune=True) == outcome(a, c, prune=False)
    assert "no such key" in outcome(a, c, prune=True)[1]


def test_requests_covered_by_different_constraints_are_not_twins():
    # Only the order r0=g1, r1=g0 satisfies the constraint on r1 and r2; treating r0 and r1 as
    # interchangeable would forbid r1 from starting below r0.
    slices = [slice_("a", [dev("g0", parentUUID="A"), dev("g1", parentUUID="B"),
                           dev("v0", "vgpu", parentUUID="A", memory="8Gi", multi=True)])]
    c = claim("c", exactly("r0"), exactly("r1"), exactly("r2", cls="vgpu"),
              constraints=[{"matchAttribute": "gpu.carve.dev/parentUUID", "requests": ["r1", "r2"]}])
    a = Allocator(slices, CLASSES)
    kind, out = outcome(a, c, prune=True)
    assert kind == "allocated" and outcome(a, c, prune=False) == (kind, out)
    assert [r["device"] for r in out["devices"]["results"]] == ["g1", "g0", "v0"]


def test_look_alike_devices_with_different_holdings_are_not_equivalent():
    # v0 and v1 differ only in what others hold (2Gi on v0); r0 on v0 fails, r0 on v1 fits.
    slices = [slice_("a", [dev("v0", "vgpu", parentUUID="A", memory="8Gi", multi=True, policy=POLICY),
                           dev("v1", "vgpu", parentUUID="A", memory="8Gi", multi=True, policy=POLICY)])]
    a = Allocator(slices, CLASSES)
    held = claim("held", exactly("r", cls="vgpu", capacity={"memory": "2Gi"}), uid="held")
    a.add_allocated({**held, "status": {"allocation": a.allocate(held)}})
    asks = ("2Gi", "6Gi", "6Gi")
    c = claim("c", *[exactly(f"r{j}", cls="vgpu", capacity={"memory": m}) for j, m in enumerate(asks)])
    kind, out = outcome(a, c, prune=True)
    assert kind == "allocated" and outcome(a, c, prune=False) == (kind, out)
    assert [r["device"] for r in out["devices"]["results"]] == ["v1", "v0", "v1"]
