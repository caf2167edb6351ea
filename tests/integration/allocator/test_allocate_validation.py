"""`carve allocate` refuses what `carve plugin` would refuse at prepare (same parser, same words), unknown
request fields, and warns about HAMi-style MiB memory amounts."""

import subprocess
from pathlib import Path

import pytest
import yaml
from allocate_cli import carve_allocate

UUID = "GPU-11111111-2222-3333-4444-555555555555"
SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-0"},
         "spec": {"driver": "gpu.carve.dev", "nodeName": "n1",
                  "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": "gpu-0", "allowMultipleAllocations": True,
                               "attributes": {"type": {"string": "vgpu"}, "uuid": {"string": UUID}},
                               "capacity": {"memory": {"value": "8Gi"}, "cores": {"value": "100"}}}]}}


def claim(config: dict | None = None, exactly_extra: dict | None = None, memory: str = "1Gi") -> dict:
    spec: dict = {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "vgpu.carve.dev", "capacity": {"requests": {"memory": memory, "cores": "20"}},
        **(exactly_extra or {})}}]}}
    if config is not None:
        spec["devices"]["config"] = [{"opaque": {"driver": "gpu.carve.dev", "parameters": {
            "apiVersion": "gpu.carve.dev/v1alpha1", "kind": "SliceConfig", **config}}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "default"}, "spec": spec}


def allocate(tmp_path: Path, obj: dict) -> subprocess.CompletedProcess:
    return carve_allocate(tmp_path, [SLICE], [obj])


def test_a_valid_opaque_config_allocates(tmp_path) -> None:
    r = allocate(tmp_path, claim({"corePolicy": "force", "priority": "low"}))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(("config", "words"), [
    ({"priority": "lowest"}, "opaque.parameters.priority: 'lowest' is not one of"),
    ({"corPolicy": "force"}, "opaque.parameters.corPolicy: unknown field"),
])
def test_a_config_prepare_would_refuse_is_not_allocated(tmp_path, config, words) -> None:
    r = allocate(tmp_path, claim(config))
    assert r.returncode == 1
    assert words in r.stderr and "Traceback" not in r.stderr
    item = yaml.safe_load(r.stdout)["items"][0]
    assert "status" not in item
    reason = item["metadata"]["annotations"]["allocate.carve.dev/reason"]
    assert reason.startswith("prepare would fail: claim default/c") and words in reason


def test_an_unknown_request_field_is_an_error(tmp_path) -> None:
    r = allocate(tmp_path, claim(exactly_extra={"capacity": {"request": {"memory": "1Gi"}}}))
    assert r.returncode == 2
    assert "spec.devices.requests[0].exactly.capacity.request: unknown field" in r.stderr


def test_a_memory_under_one_mebibyte_warns_about_hami_mib(tmp_path) -> None:
    r = allocate(tmp_path, claim(memory="4096"))
    assert "capacity.requests.memory: '4096' is 4096 bytes; HAMi's nvidia.com/gpumem counts MiB" in r.stderr
    assert "write 4096Mi" in r.stderr
