"""`carve simulate` reads a trace with bounded cost and names what is wrong: nesting past the limit (which
would be RecursionError in PyYAML or a crash later) and claims of the wrong shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.simulate.inputs import SimulateError, load_trace

POD = "pods:\n- name: a\n  arrival: 0\n  duration: 1\n  claims: [{devices: %s}]\n"
GOOD_REQUEST = "{name: r, exactly: {deviceClassName: gpu.carve.dev}}"


def trace(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.yaml"
    path.write_text(text)
    return path


def test_a_trace_nested_thousands_deep_is_an_error_not_a_recursion_error(tmp_path):
    with pytest.raises(SimulateError, match=r"^trace\.yaml: nested deeper than 100 levels$"):
        load_trace(trace(tmp_path, "pods: " + "[" * 3000 + "]" * 3000))


def test_a_claim_nested_past_the_limit_names_the_field(tmp_path):
    deep = "[" * 150 + "]" * 150
    text = POD % f"{{requests: [{{name: r, exactly: {{deviceClassName: x, selectors: {deep}}}}}]}}"
    with pytest.raises(SimulateError, match=r"^trace\.yaml: pods\[0\]\.claims\[0\]\.devices\.requests\[0\]"):
        load_trace(trace(tmp_path, text))


@pytest.mark.parametrize(("devices", "message"), [
    ("{requests: [{name: r, exactly: x}]}", "devices.requests[0].exactly: expected an object, got str 'x'"),
    (f"{{requests: [{GOOD_REQUEST}], constraints: [{{matchAttribute: 5}}]}}",
     "devices.constraints[0].matchAttribute: expected a qualified attribute name, got int 5"),
    ("{requests: [{name: r, exactly: {deviceClassName: gpu.carve.dev, count: two}}]}",
     "request r: count: expected an integer, got str 'two'"),
])
def test_a_claim_of_the_wrong_shape_is_named_by_pod_and_field(tmp_path, devices, message):
    with pytest.raises(SimulateError) as e:
        load_trace(trace(tmp_path, POD % devices))
    assert str(e.value) == f"trace.yaml: pods[0] (a): claims[0]: {message}"
