"""The legacy device plugin against the fake kubelet: registration, ListAndWatch, Allocate and
PreStartContainer, and restarts of either side. The plugin runs on real unix sockets; the kubelet's calls
come in its order."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from support.fake_kubelet import StartError
from support.legacy_node import LegacyNode, gpu_pod

from api.grpc import deviceplugin_v1beta1_pb2 as pb
from driver import names
from driver.legacy.deviceplugin import LegacyDevicePlugin
from driver.legacy.records import parse_node_gpus
from driver.limits import Region, read_limits

MIB = 1024**2
GPU, MEM, PCT, CORES, PRIO = (
    names.LEGACY_GPU,
    names.LEGACY_GPUMEM,
    names.LEGACY_GPUMEM_PERCENTAGE,
    names.LEGACY_GPUCORES,
    names.LEGACY_PRIORITY,
)


def run(legacy: LegacyNode, name: str, limits: dict, annotations: dict | None = None):
    pod = gpu_pod(name, [("main", limits)], annotations)
    assert legacy.schedule(pod) == {"Error": ""}
    legacy.admit(pod)
    return legacy.kubelet.start_container("team", name, "main")


def record(legacy: LegacyNode, name: str):
    return legacy.extender.state.assignment(f"uid-{name}").containers[0]


def test_registers_split_count_devices_with_prestart(legacy):
    legacy.start_plugin()
    k = legacy.kubelet
    assert k.registrations == 1
    assert k.plugin.options.pre_start_required
    ids = k.healthy_ids()
    assert len(ids) == 2 * 4
    assert {i.rsplit("-", 1)[0] for i in ids} == {g.uuid for g in legacy.gpus}
    inventory = parse_node_gpus(legacy.api.get_node(legacy.node))
    assert [(g.uuid, g.split, g.memoryMiB, g.healthy) for g in inventory.gpus] == [
        (g.uuid, 4, 80 * 1024, True) for g in legacy.gpus
    ]


def test_health_change_resends_the_full_list(legacy):
    legacy.start_plugin()
    k = legacy.kubelet
    sick = legacy.gpus[1].uuid
    legacy.health[sick] = False
    assert k.wait_for(lambda k: len(k.healthy_ids()) == 4)
    assert all(not i.startswith(sick) for i in k.healthy_ids())
    assert len(k.plugin.devices) == 8  # unhealthy devices stay listed (capacity), only allocatable drops
    inventory = parse_node_gpus(legacy.api.get_node(legacy.node))
    assert [g.healthy for g in inventory.gpus] == [True, False]
    legacy.health[sick] = True
    assert k.wait_for(lambda k: len(k.healthy_ids()) == 8)


@pytest.mark.parametrize("count", [1, 2])
def test_allocate_n_gpus_gets_each_gpus_limits_nodes_and_limiter(legacy, count):
    legacy.start_plugin()
    started = run(legacy, "p", {GPU: count, MEM: 10000, CORES: 30})
    assigned = record(legacy, "p")
    env = started.env
    for i in range(count):
        assert env[f"CARVE_MEMORY_LIMIT_{i}"] == str(10000 * MIB)
        assert env[f"CARVE_CORES_LIMIT_{i}"] == "30"
    assert f"CARVE_MEMORY_LIMIT_{count}" not in env
    minors = sorted(int(d.uuid[4:12]) for d in assigned.devices)
    gpu_nodes = sorted(n["path"] for n in started.device_nodes if n["path"][len("/dev/nvidia") :].isdigit())
    assert gpu_nodes == [f"/dev/nvidia{m}" for m in minors]
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= {n["path"] for n in started.device_nodes}
    by_target = {m["containerPath"]: m["hostPath"] for m in started.mounts}
    assert by_target["/usr/local/carve/lib/libcarve-limiter.so"].endswith(names.LIMITER_LIBRARY)
    preload = [h for h in started.hooks if h["args"][:2] == [names.HOOK_BINARY, "preload"]]
    assert len(preload) == 1 and names.LIMITER_CONTAINER_PATH in preload[0]["args"]
    with Region.open(Path(by_target[env["CARVE_REGION"]])) as region:
        assert region.device_count == count
    # the limits the limiter enforces: the plugin-owned limits file, mounted read-only next to the region
    limits = read_limits(Path(by_target[env["CARVE_REGION"].rsplit("/", 1)[0] + "/limits"]) / "limits")
    assert list(limits.memory_limits) == [10000 * MIB] * count
    assert sorted(limits.uuids) == sorted(d.uuid for d in assigned.devices)
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert not [k for k in env if k.startswith(("CUDA_DEVICE_MEMORY", "CUDA_DEVICE_SM", "GPU_CORE"))]


def test_percentage_charges_its_share_of_the_gpu(legacy):
    legacy.start_plugin()
    started = run(legacy, "p", {GPU: 1, PCT: 25})
    assert started.env["CARVE_MEMORY_LIMIT_0"] == str(80 * 1024 * MIB // 4)
    assert "CARVE_CORES_LIMIT_0" not in started.env  # percent < 100 without gpucores: no SM cap (HAMi)


def test_gpu_only_is_a_whole_exclusive_card(legacy):
    legacy.start_plugin()
    started = run(legacy, "whole", {GPU: 1})
    assert started.env["CARVE_MEMORY_LIMIT_0"] == str(80 * 1024 * MIB)
    assert "CARVE_CORES_LIMIT_0" not in started.env  # 100% is "no throttle" for the limiter
    taken = record(legacy, "whole").devices[0].uuid
    # Nobody else may share that card; the next pod lands on the other GPU.
    run(legacy, "small", {GPU: 1, MEM: 1000})
    assert record(legacy, "small").devices[0].uuid != taken


def test_priority_maps_to_carve_priority(legacy):
    legacy.start_plugin()
    assert run(legacy, "low", {GPU: 1, MEM: 1000, PRIO: 1}).env["CARVE_PRIORITY"] == "low"
    assert run(legacy, "high", {GPU: 1, MEM: 1000, PRIO: 0}).env["CARVE_PRIORITY"] == "high"


def test_annotation_delivery_for_kubelets_without_cdi_devices():
    node = LegacyNode(delivery="cdi-annotation")
    try:
        node.start_plugin()
        started = run(node, "p", {GPU: 1, MEM: 2000})
        c = node.kubelet.container("team", "p", "main")
        assert not c.response.cdi_devices
        assert [k for k in c.response.annotations if k.startswith("cdi.k8s.io/")]
        assert started.env["CARVE_MEMORY_LIMIT_0"] == str(2000 * MIB)
    finally:
        node.close()


def test_pod_without_an_assignment_record_cannot_start(legacy):
    """A pod that bypassed the extender (nodeName set by hand) and forged the assignment annotation."""
    legacy.start_plugin()
    forged = gpu_pod("sneaky", [("main", {GPU: 1})])
    forged["spec"]["nodeName"] = legacy.node
    forged["metadata"]["annotations"][names.LEGACY_ASSIGNMENT_ANNOTATION] = json.dumps(
        {"main": [f"{legacy.gpus[0].uuid}:81920:100"]}
    )
    legacy.api.add_pod(forged)
    legacy.admit(forged)
    with pytest.raises(StartError, match="no assignment record"):
        legacy.kubelet.start_container("team", "sneaky", "main")
    assert not list(legacy.cdi_dir.glob("*.json"))


def test_users_annotation_never_changes_the_limits(legacy):
    legacy.start_plugin()
    pod = gpu_pod("p", [("main", {GPU: 1, MEM: 1000})])
    assert legacy.schedule(pod) == {"Error": ""}
    # The tenant rewrites the copy on its pod to claim a whole GPU.
    legacy.api.patch_pod_annotations(
        "team",
        "p",
        {names.LEGACY_ASSIGNMENT_ANNOTATION: json.dumps({"main": [f"{legacy.gpus[1].uuid}:81920:100"]})},
    )
    legacy.admit(pod)
    started = legacy.kubelet.start_container("team", "p", "main")
    assert started.env["CARVE_MEMORY_LIMIT_0"] == str(1000 * MIB)


def test_pod_recreated_under_the_same_name_never_gets_the_old_limits(legacy):
    legacy.start_plugin()
    old = gpu_pod("web", [("main", {GPU: 1, MEM: 30000})])
    assert legacy.schedule(old) == {"Error": ""}
    legacy.api.delete_pod("team", "web")  # deleted between bind and Allocate
    new = gpu_pod("web", [("main", {GPU: 1, MEM: 1000})])
    new["metadata"]["uid"] = "uid-web-2"
    new["spec"]["nodeName"] = legacy.node  # bound by someone else, no record of its own
    legacy.api.add_pod(new)
    legacy.admit(new)
    with pytest.raises(StartError, match="uid-web-2"):
        legacy.kubelet.start_container("team", "web", "main")


def test_plugin_restart_re_registers_and_running_pods_restart(legacy):
    legacy.start_plugin()
    first = run(legacy, "p", {GPU: 1, MEM: 4000})
    legacy.plugin.stop()
    legacy.start_plugin()
    assert legacy.kubelet.registrations == 2
    again = legacy.kubelet.start_container("team", "p", "main")  # container restart: checkpointed response
    assert again.env == first.env


def test_kubelet_restart_is_noticed_and_registration_repeated(legacy):
    legacy.start_plugin()
    first = run(legacy, "p", {GPU: 1, MEM: 4000})
    legacy.kubelet.restart()
    assert legacy.kubelet.wait_for(lambda k: k.registrations == 2 and len(k.healthy_ids()) == 8)
    assert legacy.kubelet.start_container("team", "p", "main").env == first.env


def test_kubelet_away_then_back_registration_retried(legacy):
    legacy.kubelet.stop()
    plugin = LegacyDevicePlugin(legacy.config, legacy.api, legacy.gpus)
    legacy.plugin = plugin
    plugin.start()
    assert plugin.registration_error
    legacy.kubelet.start()
    assert legacy.kubelet.wait_for(lambda k: k.registrations == 1 and len(k.healthy_ids()) == 8)


def test_reboot_reuses_checkpointed_response_and_files_are_recreated(legacy):
    legacy.start_plugin()
    first = run(legacy, "p", {GPU: 2, MEM: 5000, CORES: 20})
    legacy.kubelet.reboot()  # /var/run/cdi is empty now
    assert legacy.kubelet.wait_for(lambda k: k.registrations == 2 and len(k.healthy_ids()) == 8)
    calls = len(legacy.kubelet.calls)
    again = legacy.kubelet.start_container("team", "p", "main")  # no Allocate: the checkpointed response
    assert not [c for c in legacy.kubelet.calls[calls:] if c.startswith("Allocate")]
    assert again.env == first.env


def test_reboot_readmission_with_a_new_allocate(legacy):
    legacy.start_plugin()
    first = run(legacy, "p", {GPU: 1, MEM: 7000})
    legacy.kubelet.reboot()
    assert legacy.kubelet.wait_for(lambda k: k.registrations == 2 and len(k.healthy_ids()) == 8)
    legacy.kubelet.remove("team", "p")
    legacy.admit(gpu_pod("p", [("main", {GPU: 1, MEM: 7000})]))
    again = legacy.kubelet.start_container("team", "p", "main")
    assert again.env["CARVE_MEMORY_LIMIT_0"] == first.env["CARVE_MEMORY_LIMIT_0"]


def test_allocate_removes_an_earlier_holders_spec(legacy):
    legacy.start_plugin()
    run(legacy, "a", {GPU: 1, MEM: 9000})
    c = legacy.kubelet.container("team", "a", "main")
    uid = c.response.cdi_devices[0].name.split("=")[1].removesuffix("-0")
    spec = legacy.cdi_dir / names.cdi_spec_file_name(uid)
    assert spec.exists()
    legacy.kubelet.remove("team", "a")
    stub, _ = legacy.kubelet._stub()
    stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=c.ids)]))
    assert not spec.exists()  # until PreStartContainer writes the new holder's


def test_unknown_device_ids_are_refused(legacy):
    legacy.start_plugin()
    stub, _ = legacy.kubelet._stub()
    with pytest.raises(grpc.RpcError) as e:
        stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["GPU-x-0"])])
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "GPU-x-0" in e.value.details()


def test_files_of_finished_allocations_are_collected(legacy):
    legacy.start_plugin()
    run(legacy, "done", {GPU: 1, MEM: 1000})
    run(legacy, "live", {GPU: 1, MEM: 1000})
    allocations = legacy.plugin.allocations
    assert len(list(legacy.cdi_dir.glob("*.json"))) == 2
    legacy.kubelet.remove("team", "done")
    assert allocations.collect() == 0  # too young: a container may just have been admitted
    assert allocations.collect(min_age_s=0) == 1
    assert len(list(legacy.cdi_dir.glob("*.json"))) == 1
    assert len(list(allocations.root.iterdir())) == 1
    live = legacy.kubelet.start_container("team", "live", "main")
    assert live.env["CARVE_MEMORY_LIMIT_0"] == str(1000 * MIB)


def test_each_container_of_a_pod_gets_its_own_size(legacy):
    legacy.start_plugin()
    pod = gpu_pod("multi", [("a", {GPU: 1, MEM: 1000}), ("b", {GPU: 1, MEM: 5000, CORES: 40})])
    assert legacy.schedule(pod) == {"Error": ""}
    legacy.admit(pod)
    a = legacy.kubelet.start_container("team", "multi", "a").env
    b = legacy.kubelet.start_container("team", "multi", "b").env
    assert (a["CARVE_MEMORY_LIMIT_0"], a.get("CARVE_CORES_LIMIT_0")) == (str(1000 * MIB), None)
    assert (b["CARVE_MEMORY_LIMIT_0"], b["CARVE_CORES_LIMIT_0"]) == (str(5000 * MIB), "40")
    assert a["CARVE_REGION"] != b["CARVE_REGION"]
