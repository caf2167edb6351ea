"""What `carve simulate` promises is what the cluster does: every placement of a simulation, replayed in
time order on fresh allocators over the ResourceSlices the plugin publishes for the same GPUs and
strategies, allocates and gets the same devices; and no GPU ever holds more than it has (memory, sharers).

The second property is the one the old time-slicing model broke: its device took any number of claims
with no memory, so a generated mix packed 40 servers of 16 GiB on one 80 GB GPU."""

from __future__ import annotations

import math

import pytest
from support.simulate_cluster import nodes

from driver.allocator import Allocator, Unallocatable
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_gpu
from driver.simulate.cluster import K8S_VERSION, device_classes
from driver.simulate.command import simulate_once
from driver.simulate.engine import NAMESPACE, share_rate
from driver.simulate.generator import generate
from driver.simulate.inputs import Demand, GenerateModel, TracePod

GI = 1024**3
STRATEGIES = ("exclusive", "soft", "mps", "slots", "mig", "timeslice")
CLUSTER = [nodes("a", 2, "4xA100-80GB"), nodes("l", 1, "2xL4")]
SEEDS = range(4)


def _mix(seed: int):
    # Arrivals dense enough that GPUs fill up and pods wait: the replay must cover full GPUs too.
    return generate(GenerateModel(kind="inference-mix", pods=70, seed=seed, interarrival_s=90))


def _published(strategy: str):
    """node -> (allocator over the plugin's slices, device -> GPU uuid, GPU uuid -> Gpu)."""
    out = {}
    for group in CLUSTER:
        for k in range(group.count):
            name = group.name if group.count == 1 else f"{group.name}-{k}"
            gpus = [fake_gpu(m, i, name) for i, m in enumerate(group.models)]
            chosen = {g.index: ("exclusive" if strategy == "mig" and not g.mig_capable else strategy)
                      for g in gpus}
            slices = build_slices(name, gpus, chosen, Settings(), k8s_version=K8S_VERSION)
            parent = {}
            for s in slices:
                for d in s["spec"].get("devices") or []:
                    attrs = d["attributes"]
                    parent[d["name"]] = (attrs.get("parentUUID") or attrs["uuid"])["string"]
            out[name] = (Allocator(slices, device_classes()), parent, {g.uuid: g for g in gpus})
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_simulated_placements_replay_on_the_published_slices(strategy: str) -> None:
    for seed in SEEDS:
        pods = _mix(seed)
        result = simulate_once(CLUSTER, pods, strategy)
        assert result.pods_scheduled > 0
        nodes_ = _published(strategy)
        index = {p.name: i for i, p in enumerate(pods)}
        order = {name: k for k, name in enumerate(result.placements)}  # placement order
        events = []
        for name, placed in result.placements.items():
            assert placed.end is not None and placed.end >= placed.start + pods[index[name]].duration - 1e-6
            # At one instant departures go first, then placements in the order the loop made them.
            events.append((placed.end, 0, index[name], name))
            events.append((placed.start, 1, order[name], name))
        holders: dict[str, dict[str, tuple[float, int]]] = {}  # GPU uuid -> pod -> (memory, sharers)
        for _, kind, _, name in sorted(events):
            placed = result.placements[name]
            allocator, parent, gpus = nodes_[placed.node]
            i = index[name]
            uids = [f"pod{i}-claim{j}" for j in range(len(pods[i].claims))]
            if kind == 0:
                for uid in uids:
                    allocator.remove_allocated(uid)
                for per_gpu in holders.values():
                    per_gpu.pop(name, None)
                continue
            got = []
            for j, spec in enumerate(pods[i].claims):
                claim = {"metadata": {"name": f"{name}-{j}", "namespace": NAMESPACE, "uid": uids[j]},
                         "spec": spec}
                try:
                    allocation = allocator.allocate(claim, node=placed.node)
                except Unallocatable as e:  # pragma: no cover - the failure message is the point
                    pytest.fail(f"seed {seed} {strategy}: {name} placed by simulate, refused here: {e}")
                allocator.add_allocated({**claim, "status": {"allocation": allocation}})
                got += [f"{r['request']}={r['device']}" for r in allocation["devices"]["results"]]
            assert got == placed.devices, (seed, strategy, name)
            # The GPUs it holds, and the pod's memory demand spread over them.
            on = {parent[d.split("=", 1)[1]] for d in got}
            for uuid in on:
                holders.setdefault(uuid, {})[name] = pods[i].demand.memory / len(on)
            for uuid in on:
                held = holders[uuid]
                assert sum(held.values()) <= gpus[uuid].memory_bytes, (seed, strategy, uuid, sorted(held))
                assert len(held) <= Settings().split_count, (seed, strategy, uuid, sorted(held))


def _timeslice_claim(memory: str | None = None) -> dict:
    alt = {"deviceClassName": "timeslice.carve.dev"}
    if memory:
        alt["capacity"] = {"requests": {"memory": memory}}
    return {"devices": {"requests": [{"name": "gpu", "exactly": alt}]}}


def test_a_time_sliced_gpu_takes_split_count_sharers_within_its_memory() -> None:
    gpu = fake_gpu("A100-80GB", 0, "n")
    slices = build_slices("n", [gpu], {0: "timeslice"}, Settings(split_count=4), k8s_version=K8S_VERSION)
    allocator = Allocator(slices, device_classes())

    def take(k: int, spec: dict) -> bool:
        claim = {"metadata": {"name": f"c{k}", "namespace": "ns", "uid": f"u{k}"}, "spec": spec}
        try:
            allocation = allocator.allocate(claim, node="n")
        except Unallocatable:
            return False
        allocator.add_allocated({**claim, "status": {"allocation": allocation}})
        return True

    assert take(0, _timeslice_claim("48Gi"))
    assert not take(1, _timeslice_claim("48Gi"))  # 96 GiB on an 80 GB GPU: the old model said yes
    allocator.remove_allocated("u0")
    assert [take(k, _timeslice_claim("1Gi")) for k in range(2, 7)] == [True, True, True, True, False]


def test_time_sliced_shares_allocated_before_the_upgrade_count_nothing_as_in_the_scheduler() -> None:
    # A claim allocated on the old time-sliced device (no capacity) has a shareID and no
    # consumedCapacity. The scheduler counts such a share as a use of the device and charges nothing
    # (kubernetes v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/allocateddevices.go,
    # foreachAllocatedDevice: the consumed-capacity callback runs only when ConsumedCapacity != nil), so
    # after the upgrade a GPU with k old shares takes split-count more. carve's allocator does the same,
    # so the simulator and the controller's what-ifs agree with the cluster (docs/simulate.md says what
    # to do about it).
    gpu = fake_gpu("A100-80GB", 0, "n")
    slices = build_slices("n", [gpu], {0: "timeslice"}, Settings(split_count=4), k8s_version=K8S_VERSION)
    allocator = Allocator(slices, device_classes())
    for k in range(3):
        old = {"metadata": {"name": f"old{k}", "namespace": "ns", "uid": f"old{k}"},
               "status": {"allocation": {"devices": {"results": [
                   {"request": "gpu", "driver": "gpu.carve.dev", "pool": "n", "device": "gpu-0",
                    "shareID": f"00000000-0000-0000-0000-00000000000{k}"}]}}}}
        allocator.add_allocated(old)
    placed = 0
    for k in range(6):
        claim = {"metadata": {"name": f"c{k}", "namespace": "ns", "uid": f"u{k}"},
                 "spec": _timeslice_claim("1Gi")}
        try:
            allocation = allocator.allocate(claim, node="n")
        except Unallocatable:
            break
        allocator.add_allocated({**claim, "status": {"allocation": allocation}})
        placed += 1
    assert placed == 4  # all four slots, beside the three old sharers: seven on a GPU of four


def test_time_sliced_pods_take_turns_when_their_compute_exceeds_the_gpu() -> None:
    def ts(name: str, cores: float) -> TracePod:
        return TracePod(name, 0, 1000, (_timeslice_claim("4Gi"),), Demand(4 * GI, cores))

    cluster = [nodes("n", 1, "1xA100-80GB", "timeslice")]
    light = [ts("a", 30), ts("b", 40)]
    heavy = [ts("c", 100), ts("d", 100)]
    fits = simulate_once(cluster, light, "timeslice")
    assert [fits.placements[p.name].end for p in light] == [1000, 1000]  # 70% of the GPU: full speed
    turns = simulate_once(cluster, heavy, "timeslice")
    assert [turns.placements[p.name].end for p in heavy] == [2000, 2000]  # 200%: half speed each
    assert math.isclose(turns.mean_stretch, 2.0) and math.isclose(turns.mean_extra_run_s, 1000)
    assert share_rate([50, 50]) == 1.0 and share_rate([100, 100, 100, 100]) == 0.25
