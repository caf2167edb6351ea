"""Every DeviceClass, ResourceClaimTemplate and Pod under deviceclasses/ is a valid API object."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from driver import names

REPO = Path(__file__).resolve().parents[3]
# The extendedResourceName variant lives one level down so `kubectl apply -f deviceclasses/` (and
# `carve allocate --classes deviceclasses/`) see each class name once.
CLASS_FILES = sorted((REPO / "deviceclasses").glob("*.yaml")) + sorted(
    (REPO / "deviceclasses" / "extended-resource").glob("*.yaml"))
EXAMPLE_FILES = sorted((REPO / "deviceclasses" / "examples").glob("*.yaml"))
VERSIONS = ("1.34.0", "1.36.0")


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


ALL_DOCS = [
    pytest.param(doc, id=f"{path.name}:{doc['kind']}/{doc['metadata']['name']}")
    for path in CLASS_FILES + EXAMPLE_FILES
    for doc in _documents(path)
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("doc", ALL_DOCS)
def test_every_yaml_object_validates_strictly(doc: dict, version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_rejects_an_unknown_field() -> None:
    # Guards the test above: a validator that accepted anything would make it pass vacuously.
    doc = copy.deepcopy(_documents(REPO / "deviceclasses" / "vgpu.carve.dev.yaml")[0])
    doc["spec"]["selectors"][0]["cel"]["expresion"] = "true"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, "1.34.0", strict=True)


def test_there_is_one_class_per_name_plus_the_extended_resource_variant() -> None:
    classes = [d for p in CLASS_FILES for d in _documents(p) if d["kind"] == "DeviceClass"]
    assert sorted({c["metadata"]["name"] for c in classes}) == sorted(names.DEVICE_CLASSES)
    top_level = [d["metadata"]["name"] for p in sorted((REPO / "deviceclasses").glob("*.yaml"))
                 for d in _documents(p) if d["kind"] == "DeviceClass"]
    assert sorted(top_level) == sorted(names.DEVICE_CLASSES)  # each name once: the folder applies as is
    with_extended = [c for c in classes if c["spec"].get("extendedResourceName")]
    assert [(c["metadata"]["name"], c["spec"]["extendedResourceName"]) for c in with_extended] == [
        (names.CLASS_GPU, names.LEGACY_GPU)
    ]


@pytest.mark.parametrize(
    ("class_name", "device_type"),
    [
        (names.CLASS_GPU, names.TYPE_GPU),
        (names.CLASS_VGPU, names.TYPE_VGPU),
        (names.CLASS_SLOT, names.TYPE_SLOT),
        (names.CLASS_MIG, names.TYPE_MIG),
        (names.CLASS_TIMESLICE, names.TYPE_TIMESLICE),
    ],
)
def test_class_selector_checks_driver_and_type(class_name: str, device_type: str) -> None:
    docs = [d for p in CLASS_FILES for d in _documents(p) if d["metadata"]["name"] == class_name]
    for doc in docs:
        expression = " ".join(s["cel"]["expression"] for s in doc["spec"]["selectors"])
        assert f'device.driver == "{names.DRIVER_NAME}"' in expression
        assert f'device.attributes["{names.DRIVER_NAME}"].type == "{device_type}"' in expression


def test_every_example_pod_uses_the_template_of_its_file() -> None:
    for path in EXAMPLE_FILES:
        docs = _documents(path)
        templates = {d["metadata"]["name"] for d in docs if d["kind"] == "ResourceClaimTemplate"}
        pods = [d for d in docs if d["kind"] == "Pod"]
        assert templates and pods, path.name
        for pod in pods:
            claims = {c["name"]: c["resourceClaimTemplateName"] for c in pod["spec"]["resourceClaims"]}
            assert set(claims.values()) <= templates, path.name
            for container in pod["spec"]["containers"]:
                assert {c["name"] for c in container["resources"]["claims"]} <= set(claims), path.name
