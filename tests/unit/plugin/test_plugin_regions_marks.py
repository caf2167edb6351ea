"""The high-priority neighbour rule of the region watcher (pure: claims in, marks out)."""

from __future__ import annotations

from driver import names
from driver.plugin.enforcement.regions import ClaimRegion, high_neighbour_marks, limited_claims
from driver.plugin.state.checkpoint import STATE_COMPLETED, STATE_STARTED, ClaimRecord, DeviceRecord


def high(uid: str, *gpus: str) -> ClaimRegion:
    return ClaimRegion(uid, "high", gpus)


def low(uid: str, *gpus: str) -> ClaimRegion:
    return ClaimRegion(uid, "low", gpus)


def test_a_low_claim_alone_on_its_gpus_has_no_neighbours():
    assert high_neighbour_marks([low("l", "GPU-A", "GPU-B")]) == {("l", 0): 0, ("l", 1): 0}


def test_each_low_device_counts_the_high_claims_on_its_own_gpu():
    claims = [low("l", "GPU-A", "GPU-B"), high("h1", "GPU-A"), high("h2", "GPU-A"), high("h3", "GPU-C")]
    assert high_neighbour_marks(claims) == {("l", 0): 2, ("l", 1): 0}


def test_a_high_claim_with_several_devices_on_one_gpu_counts_once():
    assert high_neighbour_marks([low("l", "GPU-A"), high("h", "GPU-A", "GPU-A")]) == {("l", 0): 1}


def test_other_low_claims_are_not_neighbours_to_yield_to():
    marks = high_neighbour_marks([low("l1", "GPU-A"), low("l2", "GPU-A"), high("h", "GPU-B")])
    assert marks == {("l1", 0): 0, ("l2", 0): 0}


def test_high_claims_get_no_mark():
    assert high_neighbour_marks([high("h1", "GPU-A"), high("h2", "GPU-A")]) == {}


def test_a_device_of_unknown_gpu_has_no_known_neighbours():
    assert high_neighbour_marks([low("l", ""), high("h", "")]) == {("l", 0): 0}


def test_only_prepared_claims_with_soft_slices_or_slots_have_regions():
    def record(uid: str, state: str, *types: str) -> ClaimRecord:
        devices = [DeviceRecord([f"r{i}"], "p", f"d{i}", None, [], t, "GPU-A") for i, t in enumerate(types)]
        return ClaimRecord(uid, "ns", uid, state, devices)

    state = {
        "soft": record("soft", STATE_COMPLETED, names.TYPE_VGPU),
        "slot": record("slot", STATE_COMPLETED, names.TYPE_SLOT, names.TYPE_GPU),
        "whole": record("whole", STATE_COMPLETED, names.TYPE_GPU),
        "mig": record("mig", STATE_COMPLETED, names.TYPE_MIG),
        "half-done": record("half-done", STATE_STARTED, names.TYPE_VGPU),
    }
    assert limited_claims(state) == ["slot", "soft"]


def test_reserved_cores_are_kept_and_best_effort_shares_what_is_left():
    from driver.plugin.enforcement.regions import effective_shares

    claims = [
        ClaimRegion("r1", "high", ("GPU-A",), (30,)),
        ClaimRegion("r2", "low", ("GPU-A",), (45,)),
        ClaimRegion("be", "high", ("GPU-A", "GPU-B"), (0, 0)),
        ClaimRegion("full", "high", ("GPU-C",), (100,)),
        ClaimRegion("squeezed", "high", ("GPU-C",), (0,)),
    ]
    assert effective_shares(claims) == {
        ("r1", 0): 30,
        ("r2", 0): 45,
        ("be", 0): 25,  # 100 - 30 - 45
        ("be", 1): 0,  # nobody reserved GPU-B: no limit
        ("full", 0): 100,
        ("squeezed", 0): 1,  # never 0 (which would mean no limit) next to a reservation
    }


def test_a_new_claims_runtime_looks_only_at_the_claims_of_its_own_gpus(tmp_path):
    """At prepare, only the claims sharing a GPU with the new one decide its share: the others' limits
    files are not read (nothing of theirs is cached), so prepare's cost follows one GPU, not the node."""
    from driver.limits.env import ClaimLimits, DeviceLimit
    from driver.limits.limitsfile import write_limits
    from driver.plugin.container.edits import ClaimFiles
    from driver.plugin.enforcement.regions import claim_runtime

    def prepared(uid: str, gpu: str, cores: int) -> ClaimRecord:
        files = ClaimFiles(tmp_path / uid)
        files.root.mkdir(parents=True)
        write_limits(files.limits, ClaimLimits((DeviceLimit(1 << 30, cores, gpu),), "/r"))
        device = DeviceRecord(["r"], "p", "d", "s", [], names.TYPE_VGPU, gpu)
        return ClaimRecord(uid, "ns", uid, STATE_COMPLETED, [device])

    state = {"same": prepared("same", "GPU-A", 60)}
    state |= {f"other{i}": prepared(f"other{i}", "GPU-B", 30) for i in range(20)}
    known: dict[str, ClaimRegion] = {}
    got = claim_runtime("new", ClaimLimits((DeviceLimit(1 << 30, 0, "GPU-A"),), "/r"), state, tmp_path, known)
    assert got.shares == (40,)  # best effort next to the 60 reserved on GPU-A
    assert set(known) == {"same", "new"}
