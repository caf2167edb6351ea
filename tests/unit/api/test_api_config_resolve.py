"""Config precedence as Kubernetes defines it (class, then claim; last matching wins) and the kind check."""

from __future__ import annotations

import pytest

from api.v1alpha1 import (
    ConfigError,
    GpuConfig,
    SliceConfig,
    request_matches,
    resolve_configs,
    split_allocation_config,
)
from driver.names import DRIVER_NAME, TYPE_GPU, TYPE_MIG, TYPE_SLOT, TYPE_TIMESLICE, TYPE_VGPU

API = "gpu.carve.dev/v1alpha1"


def entry(params: dict, requests: list[str] | None = None, driver: str = DRIVER_NAME) -> dict:
    out: dict = {"opaque": {"driver": driver, "parameters": params}}
    if requests is not None:
        out["requests"] = requests
    return out


def slice_cfg(**fields) -> dict:
    return {"apiVersion": API, "kind": "SliceConfig", **fields}


def gpu_cfg(strategy: str = "Exclusive", **sharing) -> dict:
    return {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": strategy, **sharing}}


def test_no_config_gives_the_default_of_the_device_type() -> None:
    assert resolve_configs([], [], "r", TYPE_GPU) == GpuConfig()
    assert resolve_configs(None, None, "r", TYPE_VGPU) == SliceConfig()


def test_claim_config_overrides_class_config() -> None:
    got = resolve_configs(
        [entry(slice_cfg(priority="high"))], [entry(slice_cfg(priority="low"))], "r", TYPE_VGPU
    )
    assert got.priority == "low"


def test_claim_config_keeps_the_class_fields_it_does_not_set() -> None:
    got = resolve_configs(
        [entry(slice_cfg(corePolicy="force", priority="low"))],
        [entry(slice_cfg(oomPolicy="kill"))],
        "r",
        TYPE_VGPU,
    )
    assert (got.corePolicy, got.priority, got.oomPolicy) == ("force", "low", "kill")


def test_class_config_applies_when_the_claim_has_none() -> None:
    assert resolve_configs([entry(slice_cfg(oomPolicy="kill"))], [], "r", TYPE_VGPU).oomPolicy == "kill"


def test_last_matching_claim_entry_wins() -> None:
    claim = [entry(slice_cfg(corePolicy="default")), entry(slice_cfg(corePolicy="force"))]
    assert resolve_configs([], claim, "r", TYPE_VGPU).corePolicy == "force"
    claim.reverse()
    assert resolve_configs([], claim, "r", TYPE_VGPU).corePolicy == "default"


def test_later_winner_does_not_merge_fields_of_earlier_entries() -> None:
    # Each entry is a whole object: the winner's unset fields take defaults, not earlier entries' values.
    claim = [entry(slice_cfg(priority="low")), entry(slice_cfg(corePolicy="force"))]
    got = resolve_configs([], claim, "r", TYPE_VGPU)
    assert (got.corePolicy, got.priority) == ("force", "high")


def test_entry_for_another_request_is_skipped() -> None:
    claim = [
        entry(slice_cfg(priority="low"), requests=["a"]),
        entry(slice_cfg(priority="high"), requests=["b"]),
    ]
    assert resolve_configs([], claim, "a", TYPE_VGPU).priority == "low"


def test_empty_requests_list_applies_to_every_request() -> None:
    claim = [entry(slice_cfg(priority="low"), requests=[])]
    assert resolve_configs([], claim, "any", TYPE_VGPU).priority == "low"


def test_entry_naming_the_main_request_applies_to_its_subrequests() -> None:
    claim = [entry(slice_cfg(priority="low"), requests=["main"])]
    assert resolve_configs([], claim, "main/small", TYPE_VGPU).priority == "low"


def test_entry_naming_a_subrequest_applies_only_to_that_subrequest() -> None:
    claim = [entry(slice_cfg(priority="low"), requests=["main/small"])]
    assert resolve_configs([], claim, "main/small", TYPE_VGPU).priority == "low"
    assert resolve_configs([], claim, "main/large", TYPE_VGPU).priority == "high"


def test_request_matching_does_not_treat_a_prefix_as_a_parent() -> None:
    assert not request_matches(["main"], "mainly")
    assert not request_matches(["main/s"], "main")


def test_entries_of_other_drivers_are_ignored_even_when_invalid_for_us() -> None:
    claim = [entry(slice_cfg(priority="low")), entry({"whatever": True}, driver="gpu.nvidia.com")]
    assert resolve_configs([], claim, "r", TYPE_VGPU).priority == "low"


def test_invalid_entry_is_reported_even_if_a_later_one_would_win() -> None:
    claim = [entry(slice_cfg(corePolicy="fastest")), entry(slice_cfg())]
    with pytest.raises(ConfigError) as caught:
        resolve_configs([], claim, "r", TYPE_VGPU)
    assert str(caught.value).startswith("claim config[0]: opaque.parameters.corePolicy: 'fastest'")
    assert caught.value.field == "opaque.parameters.corePolicy"


def test_invalid_entry_for_another_request_is_not_this_devices_problem() -> None:
    claim = [entry(slice_cfg(corePolicy="fastest"), requests=["other"])]
    assert resolve_configs([], claim, "r", TYPE_VGPU) == SliceConfig()


def test_class_entry_errors_say_class() -> None:
    with pytest.raises(ConfigError, match=r"^class config\[1\]: opaque.parameters.kind"):
        resolve_configs([entry(slice_cfg()), entry({"apiVersion": API, "kind": "Nope"})], [], "r", TYPE_VGPU)


def test_missing_parameters_are_an_error() -> None:
    with pytest.raises(ConfigError, match=r"claim config\[0\]: opaque.parameters: required"):
        resolve_configs([], [{"opaque": {"driver": DRIVER_NAME}}], "r", TYPE_GPU)


@pytest.mark.parametrize("device_type", [TYPE_GPU, TYPE_MIG, TYPE_TIMESLICE])
def test_slice_config_on_a_hardware_device_names_both(device_type: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_configs([], [entry(slice_cfg())], "r", device_type)
    message = str(caught.value)
    assert "SliceConfig" in message and f"device type {device_type}" in message and "use GpuConfig" in message


@pytest.mark.parametrize("device_type", [TYPE_VGPU, TYPE_SLOT])
def test_gpu_config_on_a_soft_device_names_both(device_type: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_configs([], [entry(gpu_cfg())], "r", device_type)
    message = str(caught.value)
    assert "GpuConfig" in message and f"device type {device_type}" in message and "use SliceConfig" in message


@pytest.mark.parametrize("device_type", [TYPE_GPU, TYPE_MIG, TYPE_TIMESLICE])
def test_gpu_config_fits_hardware_devices(device_type: str) -> None:
    got = resolve_configs([], [entry(gpu_cfg("TimeSlicing"))], "r", device_type)
    assert got.sharing.strategy == "TimeSlicing"


def test_time_slice_interval_is_refused_on_a_mig_device() -> None:
    claim = [entry(gpu_cfg("TimeSlicing", timeSlicing={"interval": "Default"}))]
    assert resolve_configs([], claim, "r", TYPE_GPU).sharing.timeSlicing.interval == "Default"
    with pytest.raises(ConfigError) as caught:
        resolve_configs([], claim, "r", TYPE_MIG)
    assert caught.value.field == "opaque.parameters.sharing.timeSlicing"
    assert "mig" in str(caught.value)


def test_unknown_device_type_is_an_error() -> None:
    with pytest.raises(ConfigError, match="device type 'fpga'"):
        resolve_configs([], [], "r", "fpga")


def test_allocation_config_splits_by_source_keeping_order() -> None:
    status_config = [
        {"source": "FromClass", **entry(slice_cfg(priority="low"), ["r"])},
        {"source": "FromClaim", **entry(slice_cfg(corePolicy="force"), ["r"])},
        {"source": "FromClass", **entry(slice_cfg(oomPolicy="kill"), ["r"])},
    ]
    from_class, from_claim = split_allocation_config(status_config)
    assert [e["opaque"]["parameters"].get("priority") for e in from_class] == ["low", None]
    assert len(from_claim) == 1
    # The claim entry wins over both class entries even though a class entry came after it in the list.
    assert resolve_configs(from_class, from_claim, "r", TYPE_VGPU).corePolicy == "force"
