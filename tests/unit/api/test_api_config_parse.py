"""Parsing of opaque configs: valid objects, defaults, and errors that name the field and the value."""

from __future__ import annotations

import json

import pytest

from api.v1alpha1 import ConfigError, GpuConfig, SliceConfig, parse_config

API = "gpu.carve.dev/v1alpha1"


def gpu(**fields) -> dict:
    return {"apiVersion": API, "kind": "GpuConfig", **fields}


def sliced(**fields) -> dict:
    return {"apiVersion": API, "kind": "SliceConfig", **fields}


def test_gpu_config_defaults_to_exclusive() -> None:
    config = parse_config(gpu())
    assert isinstance(config, GpuConfig)
    assert config.sharing.strategy == "Exclusive"
    assert config.sharing.timeSlicing is None


def test_gpu_config_time_slicing_with_the_default_interval() -> None:
    config = parse_config(gpu(sharing={"strategy": "TimeSlicing", "timeSlicing": {"interval": "Default"}}))
    assert config.sharing.strategy == "TimeSlicing"
    assert config.sharing.timeSlicing.interval == "Default"


@pytest.mark.parametrize("interval", ["Short", "Medium", "Long"])
def test_time_slice_lengths_carve_cannot_apply_are_refused_with_the_reason(interval: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(gpu(sharing={"strategy": "TimeSlicing", "timeSlicing": {"interval": interval}}))
    assert caught.value.field == "sharing.timeSlicing.interval"
    assert caught.value.value == interval
    assert "NVML" in str(caught.value) and "only Default" in str(caught.value)


def test_slice_config_defaults() -> None:
    config = parse_config(sliced())
    assert isinstance(config, SliceConfig)
    assert (config.corePolicy, config.priority, config.oomPolicy) == ("default", "high", "error")


def test_slice_config_all_fields() -> None:
    config = parse_config(sliced(corePolicy="force", priority="low", oomPolicy="kill"))
    assert (config.corePolicy, config.priority, config.oomPolicy) == ("force", "low", "kill")


def test_parses_json_bytes_as_found_in_raw_extension() -> None:
    raw = json.dumps(sliced(corePolicy="disable")).encode()
    assert parse_config(raw).corePolicy == "disable"


def test_invalid_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_config(b"{corePolicy: force")


def test_non_object_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="expected a JSON object, got list"):
        parse_config(b"[1, 2]")


@pytest.mark.parametrize(
    ("raw", "field", "value", "words"),
    [
        (
            sliced(corePolicy="fastest"),
            "corePolicy",
            "fastest",
            ["'fastest'", "'default'", "'force'", "'disable'"],
        ),
        (sliced(priority="urgent"), "priority", "urgent", ["'urgent'", "'high'", "'low'"]),
        (sliced(oomPolicy="swap"), "oomPolicy", "swap", ["'swap'", "'error'", "'kill'"]),
        (
            gpu(sharing={"strategy": "MPS"}),
            "sharing.strategy",
            "MPS",
            ["'MPS'", "'Exclusive'", "'TimeSlicing'"],
        ),
        (
            gpu(sharing={"strategy": "TimeSlicing", "timeSlicing": {"interval": "Fast"}}),
            "sharing.timeSlicing.interval",
            "Fast",
            ["'Fast'", "'Default'", "'Short'", "'Medium'", "'Long'"],
        ),
        (sliced(corepolicy="force"), "corepolicy", "force", ["unknown field"]),
        (gpu(sharing={"strategy": "Exclusive", "mode": "x"}), "sharing.mode", "x", ["unknown field"]),
        (gpu(sharing="TimeSlicing"), "sharing", "TimeSlicing", ["'TimeSlicing'"]),
        (sliced(priority=1), "priority", 1, ["1 is not one of"]),
        ({"kind": "GpuConfig"}, "apiVersion", None, ["missing", API]),
        ({"apiVersion": "gpu.carve.dev/v1", "kind": "GpuConfig"}, "apiVersion", "gpu.carve.dev/v1", ["v1'"]),
        ({"apiVersion": API}, "kind", None, ["missing", "GpuConfig", "SliceConfig"]),
        ({"apiVersion": API, "kind": "MigConfig"}, "kind", "MigConfig", ["'MigConfig'", "GpuConfig"]),
    ],
)
def test_error_names_the_field_and_the_value(raw: dict, field: str, value, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    err = caught.value
    assert err.field == field
    assert err.value == value
    assert str(err).startswith(f"{field}: ")
    for word in words:
        assert word in str(err)


def test_time_slicing_settings_need_the_time_slicing_strategy() -> None:
    raw = gpu(sharing={"strategy": "Exclusive", "timeSlicing": {"interval": "Default"}})
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    assert caught.value.field == "sharing.timeSlicing"
    assert caught.value.value == {"interval": "Default"}
    assert "only valid with strategy TimeSlicing" in str(caught.value)


def test_time_slicing_settings_without_strategy_are_rejected_because_the_default_is_exclusive() -> None:
    with pytest.raises(ConfigError, match=r"sharing\.timeSlicing: .*strategy is Exclusive"):
        parse_config(gpu(sharing={"timeSlicing": {}}))


def test_every_bad_field_is_reported_not_only_the_first() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(sliced(corePolicy="x", oomPolicy="y"))
    assert [f for f, _, _ in caught.value.issues] == ["corePolicy", "oomPolicy"]
    assert "corePolicy: " in str(caught.value) and "; oomPolicy: " in str(caught.value)


def test_kind_fields_of_the_other_kind_are_unknown() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(gpu(corePolicy="force"))
    assert caught.value.field == "corePolicy"
    assert "unknown field" in str(caught.value)


def test_models_are_immutable() -> None:
    config = parse_config(sliced())
    with pytest.raises(ValueError):
        config.priority = "low"


def test_the_reason_holds_nvml_has_no_time_slice_setter_for_bare_metal_gpus() -> None:
    # The refusal above says NVML cannot set a bare-metal GPU's time slice; the NVML header the native
    # build uses must agree (only vGPU scheduler setters). A new setter would make this fail: apply it then.
    import re
    from pathlib import Path

    import nvidia

    headers = sorted(h for p in nvidia.__path__ for h in Path(p).rglob("nvml.h"))
    assert headers, "nvml.h not found (nvidia-nvml-dev is a dev dependency)"
    declared = set(re.findall(r"DECLDIR (nvml\w+)\(", headers[-1].read_text()))
    setters = {f for f in declared if "Set" in f and re.search(r"Sched|Slice", f)}
    assert setters and all("Vgpu" in f for f in setters), setters
