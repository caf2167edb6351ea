"""Every ```yaml block in docs/ is checked: API objects against the Kubernetes schema (strict), claims and
templates also through `carve allocate`'s claim reader and request-field check and every carve opaque
config through the plugin's parser; carve's own kinds through their models; the simulator's files through
its loaders; the few fragments (a claim's requests or constraints, an annotation) inside the object they
belong to. A block nothing here recognises fails: a new kind of example needs a check."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from api.v1alpha1.config import parse_config
from api.v1alpha1.partitioning import parse_node_partitioning, parse_policy
from driver import names
from driver.allocator.command import as_claim, check_request_fields
from driver.allocator.model import read_claim, read_class
from driver.simulate.inputs import cluster_from_data, trace_from_data

REPO = Path(__file__).resolve().parents[3]
FENCE = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)
K8S_KINDS = {
    "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "Pod", "ResourceSlice", "Job", "ResourceQuota",
}
# Kueue's kinds in docs/kueue.md (v1beta2, the version e2e/test_kueue.py uses against the real Kueue).
KUEUE_KINDS = {"Configuration", "ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"}


def blocks() -> list[Any]:
    out = []
    for path in sorted((REPO / "docs").glob("*.md")):
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text[: m.start()].count("\n") + 1
            out.append(pytest.param(m.group(1), id=f"{path.name}:{line}"))
    return out


def _claim_of(template_or_claim: dict) -> dict:
    claim = as_claim(template_or_claim)
    claim.setdefault("metadata", {}).setdefault("namespace", "default")
    return claim


def check_claim(obj: dict) -> None:
    claim = _claim_of(obj)
    check_request_fields(claim)
    read_claim(claim)
    for entry in (claim.get("spec") or {}).get("devices", {}).get("config") or []:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") == names.DRIVER_NAME:
            parse_config(opaque["parameters"])


def check_object(doc: dict) -> None:
    kind = doc.get("kind")
    if kind in K8S_KINDS:
        kubernetes_validate.validate(doc, "1.36.0", strict=True)
        if kind in ("ResourceClaim", "ResourceClaimTemplate"):
            check_claim(doc)
        elif kind == "DeviceClass":
            read_class(doc)
            for entry in doc["spec"].get("config") or []:
                parse_config(entry["opaque"]["parameters"])
    elif kind in KUEUE_KINDS and str(doc.get("apiVersion", "")).endswith("kueue.x-k8s.io/v1beta2"):
        check_kueue(doc)
    elif kind in ("GpuConfig", "SliceConfig"):
        parse_config(doc)
    elif kind == "NodePartitioning":
        parse_node_partitioning(doc)
    elif kind == "PartitioningPolicy":
        parse_policy(doc)
    else:
        check_fragment(doc)


def check_kueue(doc: dict) -> None:
    """Kueue objects: the mappings name carve's DeviceClasses (deviceclasses/), a ClusterQueue's quotas
    are all covered resources. (Their schemas are Kueue's CRDs, which the e2e applies.)"""
    kind = doc["kind"]
    if kind == "Configuration":
        assert doc["apiVersion"] == "config.kueue.x-k8s.io/v1beta2", doc["apiVersion"]
        classes = (REPO / "deviceclasses").glob("*.yaml")
        shipped = {read_class(yaml.safe_load(p.read_text())).name for p in classes}
        for mapping in doc["resources"]["deviceClassMappings"]:
            assert set(mapping["deviceClassNames"]) <= shipped, mapping
    elif kind == "ClusterQueue":
        for group in doc["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                assert {r["name"] for r in flavor["resources"]} <= set(group["coveredResources"]), flavor
    else:
        assert doc["apiVersion"] == "kueue.x-k8s.io/v1beta2", doc["apiVersion"]


def _claim_with(devices: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "doc-example", "namespace": "default"}, "spec": {"devices": devices}}


def check_fragment(doc: dict) -> None:
    if set(doc) == {"nodes"}:
        cluster_from_data(doc, "docs example")
    elif set(doc) <= {"pods", "generate"}:
        trace_from_data(doc, "docs example")
    elif "requests" in doc or "constraints" in doc:
        devices = dict(doc)
        if "requests" not in devices:  # constraints alone: give them the request they name
            names_used = {r for c in doc["constraints"] for r in c.get("requests") or []}
            devices["requests"] = [{"name": n, "exactly": {"deviceClassName": "vgpu.carve.dev"}}
                                   for n in sorted(names_used)]
        claim = _claim_with(devices)
        kubernetes_validate.validate(claim, "1.36.0", strict=True)
        check_claim(claim)
    elif set(doc) == {"metadata"}:  # a fragment of carve allocate's output
        claim = _claim_with({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.carve.dev"}}]})
        claim["metadata"].update(doc["metadata"])
        kubernetes_validate.validate(claim, "1.36.0", strict=True)
    elif set(doc) == {"status"} and "devices" in doc["status"]:  # a claim's status.devices (docs/plugin.md)
        claim = _claim_with({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "vgpu.carve.dev"}}]})
        claim["status"] = doc["status"]
        kubernetes_validate.validate(claim, "1.36.0", strict=True)
        for entry in doc["status"]["devices"]:
            assert entry["driver"] == names.DRIVER_NAME, entry
            assert entry["data"]["apiVersion"] == names.CONFIG_API_VERSION, entry
    elif set(doc) == {"status"} and "containerStatuses" in doc["status"]:  # a pod's health view (health.md)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": doc["status"]}
        kubernetes_validate.validate(pod, "1.36.0", strict=True)
    elif set(doc) <= {"devicePlugin", "migManager", "toolkit"}:  # GPU Operator values (install.md)
        check_gpu_operator_values(doc)
    else:
        pytest.fail(f"no check for this YAML block (keys {sorted(doc)}): add one to {__file__}")


def check_mutation(entry: dict) -> None:
    """A mutation entry: its file exists and its `original` text occurs exactly once there."""
    assert {"id", "file", "original", "mutated", "tests"} <= set(entry), sorted(entry)
    source = (REPO / entry["file"]).read_text()
    assert source.count(entry["original"]) == 1, f"{entry['id']}: original must occur once in {entry['file']}"


@pytest.mark.parametrize("text", blocks())
def test_every_yaml_example_in_docs_is_valid(text: str) -> None:
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert docs, "an empty YAML block"
    if len(docs) == 1 and isinstance(docs[0], list):  # entries of hack/mutations.yaml (docs/testing.md)
        for entry in docs[0]:
            check_mutation(entry)
        return
    for doc in docs:
        assert isinstance(doc, dict), f"a YAML block that is not an object: {doc!r}"
        check_object(doc)


def test_the_checks_catch_a_bad_example() -> None:
    # Guards the test above: each check must refuse what it exists to refuse.
    path = REPO / "deviceclasses" / "examples" / "whole-gpu.yaml"
    template = next(yaml.safe_load_all(path.read_text()))
    request = template["spec"]["spec"]["devices"]["requests"][0]
    request["exactly"]["capacity"] = {"request": {"memory": "1Gi"}}
    with pytest.raises(Exception, match=r"capacity\.request: unknown field"):
        check_claim(template)
    del request["exactly"]["capacity"]
    parameters = {"apiVersion": names.CONFIG_API_VERSION, "kind": "SliceConfig", "priority": "lowest"}
    template["spec"]["spec"]["devices"]["config"] = [
        {"opaque": {"driver": names.DRIVER_NAME, "parameters": parameters}}
    ]
    with pytest.raises(Exception, match="lowest"):
        check_claim(template)
    with pytest.raises(kubernetes_validate.ValidationError):
        check_object({**template, "spec": {"spec": {"devices": {"requests": [{"nam": "x"}]}}}})
    with pytest.raises(pytest.fail.Exception):
        check_object({"something": "else"})


# The GPU Operator's toolkit container writes each of these env vars as the config.toml key beside it.
TOOLKIT_ENV_KEYS = {
    name: name.lower().replace("_", "-")
    for name in (
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED",
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS",
    )
}


def check_gpu_operator_values(doc: dict) -> None:
    """The recipe leaves carve the only device plugin and MIG's only manager, and the toolkit config it
    yields has nothing the plugin's toolkit check (driver/plugin/toolkit.py) reports."""
    from driver.plugin.toolkit import check_config

    assert doc["devicePlugin"] == {"enabled": False} and doc["migManager"] == {"enabled": False}, doc
    env = {e["name"]: e["value"] for e in doc["toolkit"]["env"]}
    assert set(env) == set(TOOLKIT_ENV_KEYS), env
    toml = "".join(f"{TOOLKIT_ENV_KEYS[name]} = {value}\n" for name, value in env.items())
    assert check_config(toml, "config.toml") == [], toml
