"""CDI spec building: names, kind, merged edits, and the minimum cdiVersion for the features used."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource

from driver import names
from driver.cdi.spec import (
    CdiDevice,
    CdiError,
    ContainerEdits,
    DeviceNode,
    Mount,
    claim_spec,
    device_ids,
    minimum_version,
)

SCHEMA_DIR = Path(__file__).resolve().parent / "cdi-schema"


def _validate(doc: dict) -> None:
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = Registry().with_resource("defs.json", Resource.opaque(defs))
    jsonschema.Draft7Validator(schema, registry=registry).validate(doc)


def test_claim_spec_has_kind_devices_and_common_edits():
    uid = "a1b2c3d4-0000-4000-8000-000000000001"
    gpu = CdiDevice(
        names.cdi_device_name(uid, "gpu-0"), ContainerEdits(device_nodes=(DeviceNode("/dev/nvidia0"),))
    )
    common = ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",), mounts=(Mount("/h/libcuda.so.1", "/usr/lib64/libcuda.so.1"),)
    )
    doc = claim_spec(uid, [gpu], common)
    _validate(doc)
    assert doc["kind"] == "k8s.gpu.carve.dev/claim"
    assert device_ids(doc) == [f"k8s.gpu.carve.dev/claim={uid}-gpu-0"]
    assert doc["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert doc["containerEdits"]["mounts"][0]["options"] == ["ro", "nosuid", "nodev", "bind"]


def test_version_is_0_3_0_without_newer_features():
    doc = claim_spec("u", [CdiDevice("abc-gpu-0")], ContainerEdits(env=("A=1",)))
    assert doc["cdiVersion"] == "0.3.0"


def test_device_name_starting_with_a_digit_needs_0_5_0():
    doc = claim_spec("1", [CdiDevice("1abc-gpu-0")], ContainerEdits())
    assert doc["cdiVersion"] == "0.5.0"


def test_device_node_host_path_needs_0_5_0():
    node = DeviceNode("/dev/nvidia0", host_path="/run/nvidia/driver/dev/nvidia0")
    doc = claim_spec("u", [CdiDevice("abc", ContainerEdits(device_nodes=(node,)))], ContainerEdits())
    assert doc["cdiVersion"] == "0.5.0"
    assert (
        doc["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] == "/run/nvidia/driver/dev/nvidia0"
    )


def test_same_host_path_is_not_written_and_keeps_0_3_0():
    node = DeviceNode("/dev/nvidia0", host_path="/dev/nvidia0")
    doc = claim_spec("u", [CdiDevice("abc", ContainerEdits(device_nodes=(node,)))], ContainerEdits())
    assert "hostPath" not in doc["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert doc["cdiVersion"] == "0.3.0"


def test_merged_edits_drop_duplicates_and_keep_order():
    a = ContainerEdits(env=("X=1",), device_nodes=(DeviceNode("/dev/nvidiactl"),))
    b = ContainerEdits(
        env=("X=1", "Y=2"), device_nodes=(DeviceNode("/dev/nvidiactl"), DeviceNode("/dev/nvidia-uvm"))
    )
    m = a.merged(b)
    assert m.env == ("X=1", "Y=2")
    assert [n.path for n in m.device_nodes] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]


def test_merged_edits_drop_duplicate_mounts():
    lib, bin_ = Mount("/h/libcuda.so.1", "/usr/lib64/libcuda.so.1"), Mount("/h/smi", "/usr/bin/nvidia-smi")
    m = ContainerEdits(mounts=(lib,)).merged(ContainerEdits(mounts=(lib, bin_)))
    assert m.mounts == (lib, bin_)


BASE = {"kind": "k8s.gpu.carve.dev/claim", "devices": [{"name": "abc", "containerEdits": {}}]}


@pytest.mark.parametrize(
    "change, version",
    [
        ({}, "0.3.0"),
        ({"containerEdits": {"mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "x"}]}}, "0.4.0"),
        ({"devices": [{"name": "abc", "annotations": {"a": "b"}, "containerEdits": {}}]}, "0.6.0"),
        ({"annotations": {"a": "b"}}, "0.6.0"),
        ({"kind": "k8s.gpu.carve.dev/claim.v2"}, "0.6.0"),
        ({"containerEdits": {"additionalGids": [44]}}, "0.7.0"),
        ({"devices": [{"name": "abc", "containerEdits": {"intelRdt": {"closID": "x"}}}]}, "0.7.0"),
    ],
)
def test_minimum_version_follows_the_cdi_feature_table(change, version):
    # CDI's own table: mount type 0.4.0; hostPath / digit-first names 0.5.0; annotations and a dotted class
    # 0.6.0; intelRdt and additionalGids 0.7.0.
    assert minimum_version({**BASE, **change}) == version


@pytest.mark.parametrize("bad", ["", "-gpu", "gpu-", "gpu 0", "gpu/0"])
def test_invalid_device_names_are_refused(bad):
    with pytest.raises(CdiError, match="not a valid CDI device name"):
        claim_spec("u", [CdiDevice(bad)], ContainerEdits())


def test_duplicate_and_missing_devices_are_refused():
    with pytest.raises(CdiError, match="appears twice"):
        claim_spec("u", [CdiDevice("a"), CdiDevice("a")], ContainerEdits())
    with pytest.raises(CdiError, match="at least one device"):
        claim_spec("u", [], ContainerEdits())
