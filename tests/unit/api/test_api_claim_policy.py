"""What a claim's config may change of its DeviceClass's: the class's claimPolicy, else the safe rule."""

from __future__ import annotations

import itertools

import pytest

from api.v1alpha1 import ConfigError, SliceConfig, allowed_values, parse_config, resolve_configs
from api.v1alpha1.policy import SAFE_ORDER, bound
from driver.names import DRIVER_NAME, TYPE_GPU, TYPE_VGPU

API = "gpu.carve.dev/v1alpha1"
CLASS = "vgpu.carve.dev"


def entry(params: dict, requests: list[str] | None = None) -> dict:
    out: dict = {"opaque": {"driver": DRIVER_NAME, "parameters": params}}
    if requests is not None:
        out["requests"] = requests
    return out


def slice_cfg(**fields) -> dict:
    return {"apiVersion": API, "kind": "SliceConfig", **fields}


def gpu_cfg(**fields) -> dict:
    return {"apiVersion": API, "kind": "GpuConfig", **fields}


def resolve(class_params: list[dict], claim_params: list[dict], device_type: str = TYPE_VGPU):
    return resolve_configs(
        [entry(p) for p in class_params], [entry(p) for p in claim_params], "r", device_type, class_name=CLASS
    )


def test_without_class_config_a_claim_cannot_disable_throttling() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([], [slice_cfg(corePolicy="disable")])
    err = caught.value
    assert err.field == "opaque.parameters.corePolicy" and err.value == "disable"
    assert str(err).startswith("claim config[0]: opaque.parameters.corePolicy: 'disable' is not allowed by ")
    assert f"DeviceClass {CLASS}" in str(err) and "may choose default, force" in str(err)


def test_a_claim_cannot_raise_the_priority_its_class_set() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([slice_cfg(priority="low")], [slice_cfg(priority="high")])
    assert caught.value.field == "opaque.parameters.priority"
    assert "may choose low)" in str(caught.value)


def test_a_claim_may_lower_its_priority_and_tighten_its_policy() -> None:
    got = resolve([], [slice_cfg(priority="low", corePolicy="force")])
    assert (got.priority, got.corePolicy) == ("low", "force")


def test_a_claim_cannot_loosen_force_back_to_default() -> None:
    with pytest.raises(ConfigError, match=r"corePolicy: 'default' is not allowed"):
        resolve([slice_cfg(corePolicy="force")], [slice_cfg(corePolicy="default")])


def test_oom_policy_is_the_claims_own_business() -> None:
    assert resolve([slice_cfg(oomPolicy="kill")], [slice_cfg(oomPolicy="error")]).oomPolicy == "error"


def test_class_claim_policy_can_allow_disable() -> None:
    cls = slice_cfg(claimPolicy={"corePolicy": ["default", "force", "disable"]})
    got = resolve([cls], [slice_cfg(corePolicy="disable")])
    assert got.corePolicy == "disable"
    assert got.claimPolicy is None  # the decision code downstream never sees the policy


def test_class_claim_policy_can_allow_raising_priority() -> None:
    cls = slice_cfg(priority="low", claimPolicy={"priority": ["high"]})
    assert resolve([cls], [slice_cfg(priority="high")]).priority == "high"


def test_class_claim_policy_can_forbid_what_the_safe_rule_allows() -> None:
    cls = slice_cfg(claimPolicy={"oomPolicy": [], "priority": ["high"]})
    with pytest.raises(ConfigError) as caught:
        resolve([cls], [slice_cfg(oomPolicy="kill")])
    assert caught.value.field == "opaque.parameters.oomPolicy"
    assert "claimPolicy.oomPolicy lists no value" in str(caught.value)
    with pytest.raises(ConfigError, match=r"priority: 'low' is not allowed .*lists high"):
        resolve([cls], [slice_cfg(priority="low")])


def test_the_class_value_itself_is_always_allowed() -> None:
    cls = slice_cfg(corePolicy="force", claimPolicy={"corePolicy": []})
    assert resolve([cls], [slice_cfg(corePolicy="force")]).corePolicy == "force"


def test_only_a_class_may_carry_a_claim_policy() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([], [slice_cfg(claimPolicy={"corePolicy": ["disable"]})])
    assert caught.value.field == "opaque.parameters.claimPolicy"
    assert str(caught.value).startswith("claim config[0]:")


def test_a_claim_policy_in_an_overridden_claim_entry_is_refused_too() -> None:
    with pytest.raises(ConfigError, match=r"^claim config\[0\]: opaque.parameters.claimPolicy"):
        resolve([], [slice_cfg(claimPolicy={"priority": ["high"]}), slice_cfg()])


def test_error_names_the_claims_own_config_index() -> None:
    with pytest.raises(ConfigError, match=r"^claim config\[3\]: opaque.parameters.corePolicy"):
        resolve_configs(
            [], [entry(slice_cfg(corePolicy="disable"))], "r", TYPE_VGPU, CLASS, claim_indices=[3]
        )


def test_gpu_config_strategy_is_free_unless_the_class_bounds_it() -> None:
    claim = gpu_cfg(sharing={"strategy": "TimeSlicing"})
    assert resolve([], [claim], TYPE_GPU).sharing.strategy == "TimeSlicing"
    cls = gpu_cfg(claimPolicy={"sharing": {"strategy": []}})
    with pytest.raises(ConfigError) as caught:
        resolve([cls], [claim], TYPE_GPU)
    assert caught.value.field == "opaque.parameters.sharing.strategy"


def test_claim_policy_values_are_checked_strictly() -> None:
    with pytest.raises(ConfigError, match=r"claimPolicy\.corePolicy\[0\]: 'off' is not one of"):
        parse_config(slice_cfg(claimPolicy={"corePolicy": ["off"]}))


@pytest.mark.parametrize("field", sorted(SAFE_ORDER))
def test_safe_rule_never_lets_a_claim_move_towards_weaker_isolation(field: str) -> None:
    order = SAFE_ORDER[field]
    for class_value, claim_value in itertools.product(order, order):
        base = SliceConfig(**{field: class_value})
        claim = parse_config(slice_cfg(**{field: claim_value}))
        allowed = order.index(claim_value) >= order.index(class_value)
        assert (claim_value in allowed_values(field, class_value, None)) is allowed
        if allowed:
            assert getattr(bound(claim, base, CLASS), field) == claim_value
        else:
            with pytest.raises(ConfigError):
                bound(claim, base, CLASS)


def test_the_burst_class_of_the_deviceclasses_page_lets_claims_disable_throttling() -> None:
    import re
    from pathlib import Path

    import kubernetes_validate
    import yaml

    doc = Path(__file__).resolve().parents[3] / "docs" / "deviceclasses.md"
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S)]
    (cls,) = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "DeviceClass"]
    kubernetes_validate.validate(cls, "1.34.0", strict=True)
    class_configs = cls["spec"]["config"]
    got = resolve_configs(
        class_configs, [entry(slice_cfg(corePolicy="disable"))], "r", TYPE_VGPU, cls["metadata"]["name"]
    )
    assert got.corePolicy == "disable"


def test_placement_is_accepted_at_prepare_whatever_the_class_says() -> None:
    # Read by carve's allocator only (the class's value wins there); prepare neither bounds nor uses it.
    got = resolve([slice_cfg(placement="binpack")], [slice_cfg(placement="spread")])
    assert got is not None
    assert resolve([], [slice_cfg(placement="spread")]) is not None
    with pytest.raises(ConfigError) as caught:
        resolve([], [slice_cfg(placement="scatter")])
    assert caught.value.field == "opaque.parameters.placement"
