"""docs/configuration.md stays true: its examples are valid, and it covers every field and value."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from api.v1alpha1 import GpuConfig, SliceConfig, parse_config, resolve_configs
from api.v1alpha1.config import Sharing, TimeSlicingSettings
from driver.names import DRIVER_NAME, TYPE_MIG, TYPE_VGPU

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def yaml_blocks() -> list[dict]:
    text = DOC.read_text()
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def opaque_entries(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    entries = (
        spec.get("config") if obj["kind"] == "DeviceClass" else (spec.get("devices") or {}).get("config")
    )
    return [e for e in entries or [] if e["opaque"]["driver"] == DRIVER_NAME]


BLOCKS = yaml_blocks()


def test_doc_has_examples() -> None:
    kinds = [b["kind"] for b in BLOCKS]
    assert {"GpuConfig", "SliceConfig", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass"} <= set(kinds)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{i}-{b['kind']}" for i, b in enumerate(BLOCKS)])
def test_every_example_is_valid(block: dict) -> None:
    if block["kind"] in ("GpuConfig", "SliceConfig"):
        assert parse_config(block).kind == block["kind"]
        return
    kubernetes_validate.validate(block, "1.34.0", strict=True)
    entries = opaque_entries(block)
    assert entries, "a Kubernetes example here should carry a carve config"
    for entry in entries:
        parse_config(entry["opaque"]["parameters"])


def test_firstavailable_example_resolves_per_alternative() -> None:
    (template,) = [b for b in BLOCKS if b.get("metadata", {}).get("name") == "mig-or-soft-configured"]
    claim_configs = opaque_entries(template)
    assert resolve_configs([], claim_configs, "gpu/mig", TYPE_MIG).sharing.strategy == "TimeSlicing"
    assert resolve_configs([], claim_configs, "gpu/soft", TYPE_VGPU).priority == "low"


def _literal_values(model: type, name: str) -> list[str]:
    annotation = typing.get_type_hints(model)[name]
    args = typing.get_args(annotation)
    # `X | None` wraps the Literal; unwrap it.
    literal = next((a for a in args if typing.get_origin(a) is typing.Literal), annotation)
    return list(typing.get_args(literal))


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (SliceConfig, "corePolicy"),
        (SliceConfig, "priority"),
        (SliceConfig, "oomPolicy"),
        (Sharing, "strategy"),
        (TimeSlicingSettings, "interval"),
    ],
)
def test_doc_names_every_field_and_value(model: type, field: str) -> None:
    text = DOC.read_text()
    assert field in text
    for value in _literal_values(model, field):
        assert f"`{value}`" in text, f"{model.__name__}.{field} value {value} is not documented"


def test_doc_states_the_defaults_the_models_have() -> None:
    text = DOC.read_text()
    defaults = SliceConfig()
    for field in ("corePolicy", "priority", "oomPolicy"):
        row = next(line for line in text.splitlines() if line.startswith(f"| `{field}`"))
        assert f"| `{getattr(defaults, field)}` |" in row
    assert GpuConfig().sharing.strategy == "Exclusive" and "`Exclusive` |" in text


def test_documented_policy_error_is_the_message_carve_gives() -> None:
    from api.v1alpha1 import ConfigError

    claim = [
        {
            "opaque": {
                "driver": DRIVER_NAME,
                "parameters": {
                    "apiVersion": "gpu.carve.dev/v1alpha1",
                    "kind": "SliceConfig",
                    "corePolicy": "disable",
                },
            }
        }
    ]
    with pytest.raises(ConfigError) as caught:
        resolve_configs([], claim, "gpu", TYPE_VGPU, class_name="vgpu.carve.dev")
    assert f"device gpu-3: {caught.value}\n" in DOC.read_text()


def test_documented_claim_policy_example_bounds_as_described() -> None:
    (cls,) = [b for b in BLOCKS if b.get("metadata", {}).get("name") == "vgpu-strict.carve.dev"]
    class_configs = opaque_entries(cls)
    claim = [
        {
            "opaque": {
                "driver": DRIVER_NAME,
                "parameters": {
                    "apiVersion": "gpu.carve.dev/v1alpha1",
                    "kind": "SliceConfig",
                    "priority": "low",
                    "oomPolicy": "error",
                },
            }
        }
    ]
    got = resolve_configs(class_configs, claim, "gpu", TYPE_VGPU, class_name="vgpu-strict.carve.dev")
    assert (got.corePolicy, got.priority, got.oomPolicy) == ("force", "low", "error")
    claim[0]["opaque"]["parameters"]["corePolicy"] = "default"
    with pytest.raises(ValueError, match="corePolicy: 'default' is not allowed by DeviceClass vgpu-strict"):
        resolve_configs(class_configs, claim, "gpu", TYPE_VGPU, class_name="vgpu-strict.carve.dev")
