"""The committed gRPC stubs: current with the .proto files, loadable together, and on the kubelet's wire."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from api.grpc import generate

STUB_MODULES = [
    "dra_v1",
    "dra_v1beta1",
    "pluginregistration",
    "deviceplugin_v1beta1",
    "dra_health_v1alpha1",
    "dra_health_v1",
    "podresources_v1",
]


def _load(stem: str, suffix: str = "_pb2"):
    return importlib.import_module(f"api.grpc.{stem}{suffix}")


def test_committed_stubs_match_freshly_generated(tmp_path: Path) -> None:
    written = generate.generate(tmp_path)
    assert written, "generator wrote nothing"
    stale = [p.name for p in written if (generate.GRPC_DIR / p.name).read_bytes() != p.read_bytes()]
    assert not stale, f"stale stubs (run `make protos`): {stale}"


def test_no_generated_module_without_a_proto() -> None:
    expected = {name for proto in generate.proto_files() for name in generate.generated_names(proto)}
    present = {p.name for p in generate.GRPC_DIR.glob("*_pb2*.py*")}
    assert present == expected


def test_every_proto_has_a_module_listed_here() -> None:
    assert sorted(p.stem for p in generate.proto_files()) == sorted(STUB_MODULES)


def test_service_stubs_use_package_relative_imports() -> None:
    for stem in STUB_MODULES:
        text = (generate.GRPC_DIR / f"{stem}_pb2_grpc.py").read_text()
        assert f"from . import {stem}_pb2 as" in text
        assert f"\nimport {stem}_pb2" not in text


def test_relative_import_rewrite_leaves_other_imports_alone() -> None:
    src = "import grpc\nimport dra_v1_pb2 as dra__v1__pb2\nimport google.protobuf.empty_pb2 as e\n"
    assert generate.relative_imports(src) == (
        "import grpc\nfrom . import dra_v1_pb2 as dra__v1__pb2\nimport google.protobuf.empty_pb2 as e\n"
    )


@pytest.mark.parametrize(
    ("stem", "service", "full_name"),
    [
        ("dra_v1", "DRAPlugin", "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"),
        ("dra_v1beta1", "DRAPlugin", "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"),
        ("pluginregistration", "Registration", "pluginregistration.Registration"),
        ("deviceplugin_v1beta1", "Registration", "v1beta1.Registration"),
        ("deviceplugin_v1beta1", "DevicePlugin", "v1beta1.DevicePlugin"),
        ("dra_health_v1alpha1", "DRAResourceHealth", "v1alpha1.DRAResourceHealth"),
        ("dra_health_v1", "DRAResourceHealth", "v1.DRAResourceHealth"),
        ("podresources_v1", "PodResourcesLister", "v1.PodResourcesLister"),
    ],
)
def test_services_have_the_kubelet_full_names(stem: str, service: str, full_name: str) -> None:
    # All modules are imported into this one process: duplicate fully-qualified names would fail here.
    for other in STUB_MODULES:
        _load(other)
        _load(other, "_pb2_grpc")
    assert _load(stem).DESCRIPTOR.services_by_name[service].full_name == full_name


@pytest.mark.parametrize(
    ("stem", "service", "methods"),
    [
        ("dra_v1", "DRAPlugin", ["NodePrepareResources", "NodeUnprepareResources"]),
        ("dra_v1beta1", "DRAPlugin", ["NodePrepareResources", "NodeUnprepareResources"]),
        ("pluginregistration", "Registration", ["GetInfo", "NotifyRegistrationStatus"]),
        ("deviceplugin_v1beta1", "Registration", ["Register"]),
        (
            "deviceplugin_v1beta1",
            "DevicePlugin",
            [
                "GetDevicePluginOptions",
                "ListAndWatch",
                "GetPreferredAllocation",
                "Allocate",
                "PreStartContainer",
            ],
        ),
        ("dra_health_v1alpha1", "DRAResourceHealth", ["NodeWatchResources"]),
        ("dra_health_v1", "DRAResourceHealth", ["NodeWatchResources"]),
        ("podresources_v1", "PodResourcesLister", ["List", "GetAllocatableResources", "Get"]),
    ],
)
def test_services_have_the_kubelet_methods(stem: str, service: str, methods: list[str]) -> None:
    desc = _load(stem).DESCRIPTOR.services_by_name[service]
    assert [m.name for m in desc.methods] == methods


def _fields(stem: str, message: str) -> dict[str, int]:
    desc = _load(stem).DESCRIPTOR.message_types_by_name[message]
    return {f.name: f.number for f in desc.fields}


# Field numbers from the wire contract (shared/reference/k8s-dra-api.md); a renumbering breaks the kubelet.
WIRE = [
    ("dra_v1", "Claim", {"namespace": 1, "uid": 2, "name": 3}),
    ("dra_v1", "NodePrepareResourcesRequest", {"claims": 1}),
    ("dra_v1", "NodePrepareResourcesResponse", {"claims": 1}),
    ("dra_v1", "NodePrepareResourceResponse", {"devices": 1, "error": 2}),
    (
        "dra_v1",
        "Device",
        {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4, "share_id": 5},
    ),
    ("dra_v1", "NodeUnprepareResourceResponse", {"error": 1}),
    ("dra_v1beta1", "Device", {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}),
    ("dra_v1beta1", "Claim", {"namespace": 1, "uid": 2, "name": 3}),
    ("pluginregistration", "PluginInfo", {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}),
    ("podresources_v1", "ListPodResourcesResponse", {"pod_resources": 1}),
    ("podresources_v1", "PodResources", {"name": 1, "namespace": 2, "containers": 3}),
    (
        "podresources_v1",
        "ContainerResources",
        {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5},
    ),
    ("podresources_v1", "ContainerDevices", {"resource_name": 1, "device_ids": 2, "topology": 3}),
    ("pluginregistration", "RegistrationStatus", {"plugin_registered": 1, "error": 2}),
    (
        "deviceplugin_v1beta1",
        "RegisterRequest",
        {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
    ),
    (
        "deviceplugin_v1beta1",
        "ContainerAllocateResponse",
        {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5},
    ),
    (
        "deviceplugin_v1beta1",
        "ContainerPreferredAllocationRequest",
        {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3},
    ),
    (
        "deviceplugin_v1beta1",
        "DevicePluginOptions",
        {"pre_start_required": 1, "get_preferred_allocation_available": 2},
    ),
    ("deviceplugin_v1beta1", "Device", {"ID": 1, "health": 2, "topology": 3}),
    (
        "dra_health_v1alpha1",
        "DeviceHealth",
        {"device": 1, "health": 2, "last_updated_time": 3, "health_check_timeout_seconds": 4, "message": 5},
    ),
    (
        "dra_health_v1",
        "DeviceHealth",
        {"device": 1, "health": 2, "last_updated_time": 3, "health_check_timeout_seconds": 4, "message": 5},
    ),
]


@pytest.mark.parametrize(("stem", "message", "numbers"), WIRE, ids=[f"{s}.{m}" for s, m, _ in WIRE])
def test_messages_have_the_wire_field_numbers(stem: str, message: str, numbers: dict[str, int]) -> None:
    assert _fields(stem, message) == numbers


def test_share_id_is_optional_so_absence_is_visible() -> None:
    v1 = _load("dra_v1")
    assert not v1.Device(device_name="gpu-0").HasField("share_id")
    assert v1.Device(device_name="gpu-0", share_id="").HasField("share_id")


def test_v1beta1_device_bytes_parse_as_v1_device_without_share_id() -> None:
    cdi_id = "k8s.gpu.carve.dev/claim=u-gpu-0"
    beta = _load("dra_v1beta1").Device(
        request_names=["r"], pool_name="node-a", device_name="gpu-0", cdi_device_ids=[cdi_id]
    )
    v1 = _load("dra_v1").Device.FromString(beta.SerializeToString())
    assert (list(v1.request_names), v1.pool_name, v1.device_name, list(v1.cdi_device_ids)) == (
        ["r"],
        "node-a",
        "gpu-0",
        [cdi_id],
    )
    assert not v1.HasField("share_id")
