"""Host topology on the real control plane (docs/devices.md, "Topology"): every carve device publishes the
standard `resource.kubernetes.io/pcieRoot` and `resource.kubernetes.io/numaNode`, and a claim that
`matchAttribute`s pcieRoot across a carve GPU and a device of another driver (a stand-in NIC driver whose
ResourceSlice the test publishes) gets the GPU under the NIC's root complex from the real kube-scheduler."""

from __future__ import annotations

import re
import uuid
from collections import defaultdict

import pytest
from kubernetes import client

from driver import names
from driver.devices.attributes import NUMA_NODE_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE
from e2e import kube

N1 = "e2e-n1"  # its soft GPUs: 1 (A100-80GB) and 2 (T4)
NIC_DRIVER = "nic.e2e.carve.dev"


def _attr(device: dict, name: str):
    value = device.get("attributes", {}).get(name)
    return None if value is None else next(iter(value.values()))


def _in_scheduler_order(slices: list[dict]) -> list[dict]:
    """A pool's devices in the order the kube-scheduler tries them (first fit): slices by name, then each
    slice's devices as listed (k8s.io/dynamic-resource-allocation/structured, sortSlicesByName)."""
    ordered = sorted(slices, key=lambda s: s["metadata"]["name"])
    return [d for s in ordered for d in s["spec"].get("devices") or []]


def _published(cluster, node: str) -> list[dict]:
    """The node's devices once its pool lists all three GPUs (the plugin may publish in steps)."""

    def complete():
        devices = _in_scheduler_order(cluster.slices(node))
        return devices if len({_attr(d, "uuid") for d in devices}) == 3 else None

    return kube.wait(f"{node}'s devices of all three GPUs", complete)


def test_every_device_publishes_its_gpus_pcie_root_and_numa_node(cluster):
    for node in cluster.nodes:
        by_gpu: dict[str, set[tuple]] = defaultdict(set)
        for device in _published(cluster, node):
            root, numa = _attr(device, PCIE_ROOT_ATTRIBUTE), _attr(device, NUMA_NODE_ATTRIBUTE)
            assert root and re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", root), (node, device["name"], root)
            assert isinstance(numa, int), (node, device["name"], numa)
            by_gpu[_attr(device, "uuid")].add((root, numa, _attr(device, "index")))
        # One answer per physical GPU, whatever the device (whole, soft, MIG, slot, time-slice); the fake
        # host has a root complex per GPU and its GPUs half on each of two NUMA nodes.
        assert all(len(v) == 1 for v in by_gpu.values()), dict(by_gpu)
        gpus = sorted((index, root, numa) for ((root, numa, index),) in by_gpu.values())
        assert len({root for _, root, _ in gpus}) == len(gpus) == 3, gpus
        assert [numa for *_, numa in gpus] == [0, 0, 1], gpus


@pytest.fixture
def nic(api):
    """A DeviceClass and a ResourceSlice of a stand-in NIC driver on e2e-n1 (no plugin: its devices can be
    allocated, never prepared); the test sets their pcieRoots. Removed after."""
    custom = client.CustomObjectsApi(api)
    tag = uuid.uuid4().hex[:6]
    cls = f"nic-{tag}.e2e.carve.dev"
    custom.create_cluster_custom_object(
        kube.GROUP,
        kube.VERSION,
        "deviceclasses",
        {
            "apiVersion": f"{kube.GROUP}/{kube.VERSION}",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC_DRIVER}"'}}]},
        },
    )
    made: list[str] = []

    def publish(roots: dict[str, str]) -> str:
        name = f"{N1}-nic-{tag}"
        devices = [{"name": n, "attributes": {PCIE_ROOT_ATTRIBUTE: {"string": r}}} for n, r in roots.items()]
        custom.create_cluster_custom_object(
            kube.GROUP,
            kube.VERSION,
            "resourceslices",
            {
                "apiVersion": f"{kube.GROUP}/{kube.VERSION}",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": NIC_DRIVER,
                    "nodeName": N1,
                    "pool": {"name": f"{N1}-nic", "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            },
        )
        made.append(name)
        return cls

    yield publish
    for name in made:
        custom.delete_cluster_custom_object(kube.GROUP, kube.VERSION, "resourceslices", name)
    custom.delete_cluster_custom_object(kube.GROUP, kube.VERSION, "deviceclasses", cls)


def test_match_attribute_pcie_root_pairs_a_gpu_with_a_nic_of_another_driver(
    cluster, api, namespace, gates_on, nic
):
    if not gates_on:
        pytest.skip("soft slices need DRAConsumableCapacity (gates off here); the attributes test runs")
    soft = [d for d in _published(cluster, N1) if _attr(d, "type") == names.TYPE_VGPU]
    assert len(soft) == 2, [d["name"] for d in soft]
    # The NIC sits under the root of the soft GPU the scheduler would try last: first fit alone would
    # take the other one. A second NIC under a root no GPU has can never pair.
    target = soft[-1]
    nic_class = nic({"nic-0": _attr(target, PCIE_ROOT_ATTRIBUTE), "nic-1": "pci0000:ff"})
    requests = [
        *kube.soft_or_slot(True),
        {"name": "nic", "exactly": {"deviceClassName": nic_class}},
    ]
    constraints = [{"requests": ["gpu", "nic"], "matchAttribute": PCIE_ROOT_ATTRIBUTE}]
    kube.create(api, namespace, kube.template("gpu-nic", requests, constraints))
    kube.create(api, namespace, kube.pod("paired", claim_template="gpu-nic"))
    assert kube.wait_outcome(api, namespace, "paired") == ("scheduled", N1)
    claim = kube.claim_of(api, namespace, "paired")
    picked = {r["request"]: (r["driver"], r["device"]) for r in kube.results(claim)}
    assert picked == {"gpu": (names.DRIVER_NAME, target["name"]), "nic": (NIC_DRIVER, "nic-0")}, picked

    # nic-0 is taken (a NIC is not shared); nic-1's root has no GPU: the claim cannot be allocated.
    kube.create(api, namespace, kube.pod("unpaired", claim_template="gpu-nic"))
    kind, message = kube.wait_outcome(api, namespace, "unpaired")
    assert kind == "unschedulable" and "claim" in message, (kind, message)


def test_real_scheduler_places_soft_slices_first_fit_whatever_the_placement_says(
    cluster, api, namespace, gates_on
):
    """On the DRA path the kube-scheduler picks the device: first fit in published order. A DeviceClass
    whose SliceConfig says `placement: spread` (accepted by the plugin at prepare) does not move the second
    slice to the idle GPU; carve's allocator, given the same slices, the same class and the first claim,
    spreads. Unset, carve's allocator agrees with the scheduler."""
    if not gates_on:
        pytest.skip("soft slices need DRAConsumableCapacity (gates off here)")
    from driver.allocator import Allocator

    first, second = (d["name"] for d in _published(cluster, N1) if _attr(d, "type") == names.TYPE_VGPU)
    custom = client.CustomObjectsApi(api)
    vgpu = custom.get_cluster_custom_object(kube.GROUP, kube.VERSION, "deviceclasses", names.CLASS_VGPU)
    spread_class = f"vgpu-spread-{uuid.uuid4().hex[:6]}.e2e.carve.dev"
    params = {"apiVersion": names.CONFIG_API_VERSION, "kind": "SliceConfig", "placement": "spread"}
    body = {
        "apiVersion": f"{kube.GROUP}/{kube.VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": spread_class},
        "spec": {
            "selectors": vgpu["spec"]["selectors"],
            "config": [{"opaque": {"driver": names.DRIVER_NAME, "parameters": params}}],
        },
    }
    custom.create_cluster_custom_object(kube.GROUP, kube.VERSION, "deviceclasses", body)
    try:
        capacity = {"requests": {"memory": "2Gi", "cores": "10"}}
        request = [{"name": "gpu", "exactly": {"deviceClassName": spread_class, "capacity": capacity}}]
        kube.create(api, namespace, kube.template("spread", request))
        got = []
        for name in ("s1", "s2"):
            kube.create(api, namespace, kube.pod(name, claim_template="spread", node=N1))
            kube.wait_running(api, namespace, name)
            claim = kube.claim_of(api, namespace, name)
            got.append(kube.results(claim)[0]["device"])
        assert got == [first, first], got

        # carve's allocator on the same slices: with the spread class the second slice goes to the idle GPU;
        # with the plain class (no placement) it agrees with the scheduler.
        first_claim = kube.claim_of(api, namespace, "s1")
        second_claim = kube.claim_of(api, namespace, "s2")
        classes = [body, vgpu]
        for cls, want in ((spread_class, second), (names.CLASS_VGPU, first)):
            model = Allocator(cluster.slices(), classes)
            model.add_allocated(first_claim)
            ask = {
                **second_claim,
                "status": {},
                "spec": {
                    "devices": {
                        "requests": [
                            {**request[0], "exactly": {**request[0]["exactly"], "deviceClassName": cls}}
                        ]
                    }
                },
            }
            alloc = model.allocate(ask, N1)
            assert alloc["devices"]["results"][0]["device"] == want, (cls, alloc)
    finally:
        for name in ("s1", "s2"):
            kube.delete_pod(api, namespace, name)
        custom.delete_cluster_custom_object(kube.GROUP, kube.VERSION, "deviceclasses", spread_class)
