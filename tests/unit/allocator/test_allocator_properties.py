"""Property tests: whatever the claims, capacities and counters hold and results repeat."""

from collections import Counter, defaultdict

from allocator_fixtures import CLASSES, claim, dev, exactly, slice_
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.allocator import Allocator, Unallocatable
from driver.allocator import quantity as q

POLICY = {"default": "1Gi", "validRange": {"min": "256Mi", "step": "256Mi"}}


def build_slices(n_gpu: int, n_soft: int, n_mig_sets: int) -> list[dict]:
    devices = [dev(f"g{i}", memory="16Gi") for i in range(n_gpu)]
    devices += [dev(f"v{i}", "vgpu", memory="4Gi", multi=True, policy=POLICY) for i in range(n_soft)]
    counters = []
    for s in range(n_mig_sets):
        counters.append({"name": f"set{s}", "counters": {"slices": {"value": "4"}, "mem": {"value": "8Gi"}}})
        for k, size in enumerate((1, 1, 2, 2, 4)):
            devices.append(dev(f"m{s}-{k}", "mig", consumes=[{"counterSet": f"set{s}", "counters": {
                "slices": {"value": str(size)}, "mem": {"value": f"{2 * size}Gi"}}}]))
    return [slice_("a", devices, counters=counters or None)]


requests = st.one_of(
    st.builds(lambda n: exactly("r", cls="gpu", count=n), st.integers(1, 2)),
    st.builds(lambda m: exactly("r", cls="vgpu", capacity={"memory": f"{m}Mi"}), st.integers(1, 5000)),
    st.builds(lambda n: exactly("r", cls="mig", count=n), st.integers(1, 3)),
)
cluster = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2))


def run(shape, reqs, releases):
    slices = build_slices(*shape)
    a = Allocator(slices, CLASSES)
    live = {}
    outcome = []
    for i, req in enumerate(reqs):
        c = claim(f"c{i}", req, uid=f"u{i}")
        try:
            out = a.allocate(c)
        except Unallocatable:
            outcome.append(None)
        else:
            a.add_allocated({**c, "status": {"allocation": out}})
            live[f"u{i}"] = out
            outcome.append(out)
        if i in releases and live:
            uid = sorted(live)[0]
            a.remove_allocated(uid)
            del live[uid]
    return slices, live, outcome


def check_invariants(slices, live):
    devices = {d["name"]: d for s in slices for d in s["spec"]["devices"]}
    counters = {cs["name"]: cs["counters"] for s in slices for cs in s["spec"].get("sharedCounters") or ()}
    exclusive = Counter()
    consumed = defaultdict(int)
    used_devices = set()
    for out in live.values():
        for r in out["devices"]["results"]:
            d = devices[r["device"]]
            used_devices.add(r["device"])
            if d.get("allowMultipleAllocations"):
                consumed[r["device"]] += q.units(r["consumedCapacity"]["memory"])
            else:
                exclusive[r["device"]] += 1
    assert all(n == 1 for n in exclusive.values()), exclusive
    for name, total in consumed.items():
        assert total <= q.units(devices[name]["capacity"]["memory"]["value"])
    use = defaultdict(int)
    for name in used_devices:
        for cc in devices[name].get("consumesCounters") or ():
            for c, v in cc["counters"].items():
                use[(cc["counterSet"], c)] += q.units(v["value"])
    for (cs, c), amount in use.items():
        assert amount <= q.units(counters[cs][c]["value"])


@settings(max_examples=60, deadline=None)
@given(cluster, st.lists(requests, min_size=1, max_size=12), st.sets(st.integers(0, 11), max_size=4))
def test_no_allocation_exceeds_capacity_or_counters_or_reuses_exclusive_devices(shape, reqs, releases):
    slices, live, _ = run(shape, reqs, releases)
    check_invariants(slices, live)


@settings(max_examples=25, deadline=None)
@given(cluster, st.lists(requests, min_size=1, max_size=8))
def test_allocation_is_deterministic(shape, reqs):
    assert run(shape, reqs, set())[2] == run(shape, reqs, set())[2]


def _multi_node_slices(shape) -> list[dict]:
    """build_slices' devices on two nodes, so claims without --node walk the nodes in order."""
    out = []
    for node in ("n1", "n2"):
        for s in build_slices(*shape):
            spec = {**s["spec"], "nodeName": node, "pool": {**s["spec"]["pool"], "name": node}}
            out.append({**s, "metadata": {"name": f"{node}-a"}, "spec": spec})
    return out


# Few shapes, so that a shape that found no room meets the same node again after a release.
few_shapes = st.one_of(
    st.builds(lambda n: exactly("r", cls="gpu", count=n), st.integers(1, 2)),
    st.builds(lambda m: exactly("r", cls="vgpu", capacity={"memory": f"{m}Mi"}),
              st.sampled_from([1024, 3000])),
    st.just(exactly("r", cls="mig")),
)


@settings(max_examples=60, deadline=None)
@given(cluster, st.lists(few_shapes, min_size=1, max_size=14), st.sets(st.integers(0, 13), max_size=8))
def test_a_long_lived_allocator_answers_as_a_fresh_one(shape, reqs, releases):
    # The caches (selector results, class index, candidates, per-device consumption, and the memo of
    # claim shapes that found no room on an unchanged node) must never change an answer: after every
    # allocation and release, a fresh Allocator given the same held claims answers the same.
    slices = _multi_node_slices(shape)
    a = Allocator(slices, CLASSES)
    live: dict[str, dict] = {}
    for i, req in enumerate(reqs):
        c = claim(f"c{i}", req, uid=f"u{i}")
        fresh = Allocator(slices, CLASSES)
        for held in live.values():
            fresh.add_allocated(held)
        answers = []
        for allocator in (a, fresh):
            try:
                answers.append(allocator.allocate(c))
            except Unallocatable as e:
                answers.append(e.reason)
        assert answers[0] == answers[1]
        if isinstance(answers[0], dict):
            held = {**c, "status": {"allocation": answers[0]}}
            a.add_allocated(held)
            live[f"u{i}"] = held
        if i in releases and live:
            uid = sorted(live)[0]
            a.remove_allocated(uid)
            del live[uid]
