"""A slice, class or claim that does not have its kind's shape is refused with an error naming the object
and the field (driver/allocator/model.py), never read with a wrong meaning: an attribute of the wrong JSON
type (`{"bool": "false"}` once read as true), a bad counter, selector, request or constraint."""

from __future__ import annotations

import celpy
import pytest
from support.decoded import decoded, read_claim, read_slice

from driver.allocator import cel, model
from driver.allocator.model import ModelError


def read_class(obj):
    return model.read_class(decoded(obj))


def slice_with(device=None, **spec):
    body = {"driver": "gpu.carve.dev", "nodeName": "n1",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [dict({"name": "g0"}, **(device or {}))]}
    body.update(spec)
    return {"metadata": {"name": "s"}, "spec": body}


@pytest.mark.parametrize(("value", "why"), [
    ({"bool": "false"}, "bool attribute is not true or false: 'false'"),
    ({"bool": 0}, "bool attribute is not true or false: 0"),
    ({"string": ["a"]}, "string attribute is not a string: ['a']"),
    ({"string": 5}, "string attribute is not a string: 5"),
    ({"int": "5"}, "int attribute is not an integer: '5'"),
    ({"int": True}, "int attribute is not an integer: True"),
    ({"int": 1.5}, "int attribute is not an integer: 1.5"),
    ({"int": 2**63}, f"int attribute is out of the int64 range: {2**63}"),
    ({"int": -(2**63) - 1}, f"int attribute is out of the int64 range: {-(2**63) - 1}"),
    ({"version": "x"}, "'x' is not a semantic version"),
    ({"version": ["1.0.0"]}, "version must be a string, not list"),
    ({"version": 5}, "version must be a string, not int"),
    ({}, "attribute has no int, bool, string or version value: {}"),
    (5, "expected a map with int, bool, string or version, got int"),
])
def test_an_attribute_of_the_wrong_type_is_refused_naming_it(value, why):
    with pytest.raises(ModelError) as e:
        read_slice(slice_with({"attributes": {"x": value}}))
    assert str(e.value).startswith("ResourceSlice s: spec.devices[0].attributes[x]: ")
    assert why in str(e.value)


@pytest.mark.parametrize("value", [
    {"int": 2**63 - 1}, {"int": -(2**63)}, {"int": 0}, {"bool": False}, {"string": ""}, {"version": "1.0.0"},
])
def test_an_attribute_of_its_type_is_read(value):
    (d,) = read_slice(slice_with({"attributes": {"x": value}})).devices
    assert d.attributes["x"] == value


def test_attributes_that_are_not_a_map_are_refused():
    with pytest.raises(ModelError, match=r"^ResourceSlice s: spec\.devices\[0\]: attributes is not a map$"):
        read_slice(slice_with({"attributes": ["x"]}))


@pytest.mark.parametrize(("spec", "message"), [
    ({"sharedCounters": [{"name": "c", "counters": {"x": {"value": "1x"}}}]},
     "ResourceSlice s: spec.sharedCounters[0]: '1x' is not a quantity"),
    ({"sharedCounters": [{"counters": {"x": {"value": "1"}}}]},
     "ResourceSlice s: spec.sharedCounters[0]: 'name'"),
    ({"pool": {"generation": 1}}, "ResourceSlice s: spec.pool: name is missing or not a str"),
    ({"driver": 5}, "ResourceSlice s: driver is missing or not a str"),
])
def test_a_bad_slice_field_is_refused_naming_it(spec, message):
    with pytest.raises(ModelError) as e:
        read_slice(slice_with(**spec))
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(("device", "message"), [
    ({"consumesCounters": [{"counterSet": "c", "counters": {"x": {"value": "1x"}}}]},
     "ResourceSlice s: spec.devices[0].consumesCounters[0]: '1x' is not a quantity"),
    ({"consumesCounters": [{"counters": {"x": {"value": "1"}}}]},
     "ResourceSlice s: spec.devices[0].consumesCounters[0]: 'counterSet'"),
    ({"capacity": {"memory": {"value": "1x"}}}, "ResourceSlice s: spec.devices[0].capacity[memory]: '1x'"),
    ({"capacity": {"memory": {}}}, "ResourceSlice s: spec.devices[0].capacity[memory]: "),
])
def test_a_bad_device_field_is_refused_naming_it(device, message):
    with pytest.raises(ModelError) as e:
        read_slice(slice_with(device))
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(("obj", "message"), [
    ({"spec": {}}, "DeviceClass: metadata.name is missing"),
    ({"metadata": {"name": ""}}, "DeviceClass: metadata.name is missing"),
    ({"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {}}]}},
     "DeviceClass c: spec.selectors[0]: cel.expression is missing"),
    ({"metadata": {"name": "c"}, "spec": {"selectors": ["x"]}},
     "DeviceClass c: spec.selectors[0]: cel.expression is missing"),
    ({"metadata": {"name": "c"}, "spec": {"selectors": {"cel": {}}}},
     "DeviceClass c: spec.selectors: expected a list, got dict {'cel': {}}"),
    ({"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": ["x"]}]}},
     "DeviceClass c: spec.selectors[0]: cel.expression is missing"),
    ({"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {"expression": 5}}]}},
     "DeviceClass c: spec.selectors[0]: cel.expression is missing"),
    ({"metadata": [1]}, "DeviceClass: metadata.name is missing"),
    ({"metadata": {"name": 5}}, "DeviceClass: metadata.name is missing"),
    ({"metadata": {"name": "c"}, "spec": "x"}, "DeviceClass c: spec: expected an object, got str 'x'"),
    ({"metadata": {"name": "c"}, "spec": {"config": "x"}},
     "DeviceClass c: spec.config: expected a list, got str 'x'"),
    ({"metadata": {"name": "c"}, "spec": {"config": [5]}},
     "DeviceClass c: spec.config[0]: expected an object, got int 5"),
])
def test_a_bad_device_class_is_refused_naming_the_field(obj, message):
    with pytest.raises(ModelError) as e:
        read_class(obj)
    assert str(e.value) == message


def test_a_device_class_without_selectors_or_config_selects_everything():
    c = read_class({"metadata": {"name": "c"}})
    assert (c.name, c.selectors, c.config) == ("c", (), ())


GPU = {"deviceClassName": "gpu"}


def _claim(requests=None, constraints=None, **devices):
    d = {"requests": requests if requests is not None else [{"name": "r", "exactly": GPU}]}
    if constraints is not None:
        d["constraints"] = constraints
    d.update(devices)
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": d}}


W = "ResourceClaim ns/c"


@pytest.mark.parametrize(("claim", "message"), [
    (_claim([{"exactly": {"deviceClassName": "gpu"}}]), f"{W}: spec.devices.requests[0].name is missing"),
    (_claim([{"name": "r", "exactly": {"count": 1}}]), f"{W}: request r: deviceClassName is missing"),
    # an empty name and one that is not a string name no class either (fresh14a1, model.py:360)
    (_claim([{"name": "r", "exactly": {"deviceClassName": ""}}]),
     f"{W}: request r: deviceClassName is missing"),
    (_claim([{"name": "r", "exactly": {"deviceClassName": 5}}]),
     f"{W}: request r: deviceClassName is missing"),
    (_claim([{"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "Some"}}]),
     f"{W}: request r: allocationMode 'Some' is not ExactCount or All"),
    (_claim([{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 0}}]),
     f"{W}: request r: count must be at least 1"),
    (_claim([{"name": "r", "exactly": {"deviceClassName": "gpu", "count": -2}}]),
     f"{W}: request r: count must be at least 1"),
    (_claim([{"name": "r", "exactly": dict(GPU, capacity={"requests": {"memory": "1x"}})}]),
     f"{W}: request r: capacity.requests: '1x' is not a quantity: unknown suffix 'x' (binary Ki..Ei, "
     "decimal n u m k M G T P E, or an exponent e3)"),
    (_claim([{"name": "r", "exactly": dict(GPU, capacity={"requests": {"memory": True}})}]),
     f"{W}: request r: capacity.requests: True is not a quantity"),
    (_claim([{"name": "r"}]), f"{W}: request r: neither exactly nor firstAvailable is set"),
    (_claim([{"name": "r", "firstAvailable": [{"deviceClassName": "gpu"}]}]),
     f"{W}: request r: firstAvailable[0].name is missing"),
    (_claim([{"name": "r", "firstAvailable": [{"name": 5, "deviceClassName": "gpu"}]}]),
     f"{W}: request r: firstAvailable[0].name is missing"),
    (_claim([{"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "gpu"},
                                              {"name": "", "deviceClassName": "gpu"}]}]),
     f"{W}: request r: firstAvailable[1].name is missing"),
    (_claim(constraints=[{"matchAttribute": 5}]),
     f"{W}: spec.devices.constraints[0].matchAttribute: expected a qualified attribute name, got int 5"),
    (_claim(constraints=[{"distinctAttribute": ["a"]}]),
     f"{W}: spec.devices.constraints[0].distinctAttribute: expected a qualified attribute name, "
     "got list ['a']"),
    (_claim(constraints=[{"matchAttribute": "d/x", "requests": [1]}]),
     f"{W}: spec.devices.constraints[0].requests: expected a list of request names"),
    (_claim(constraints=[{"matchAttribute": "d/x", "requests": "r"}]),
     f"{W}: spec.devices.constraints[0].requests: expected a list, got str 'r'"),
    (_claim(constraints=[{"matchAttribute": "d/x", "requests": ["q"]}]),
     f"{W}: spec.devices.constraints[0].requests: q is not a request of the claim"),
    (_claim(constraints=[{}]), f"{W}: spec.devices.constraints[0]: set exactly one of matchAttribute, "
                               "distinctAttribute"),
    (_claim(config=[5]), f"{W}: spec.devices.config[0]: expected an object, got int 5"),
    (_claim("x"), f"{W}: spec.devices.requests: expected a list, got str 'x'"),
    (_claim(["x" * 50]), f"{W}: spec.devices.requests[0]: expected an object, got str '{'x' * 36}..."),
])
def test_a_bad_claim_is_refused_naming_the_field(claim, message):
    with pytest.raises(ModelError) as e:
        read_claim(claim)
    assert str(e.value) == message


def test_a_v1beta1_request_with_its_class_at_the_top_is_read_as_exactly():
    c = read_claim(_claim([{"name": "r", "deviceClassName": "gpu", "count": 2, "adminAccess": True}]))
    ((r,),) = c.requests
    assert (r.name, r.class_name, r.count, r.admin, r.all_devices) == ("r", "gpu", 2, True, False)


def test_a_first_available_subrequest_is_never_admin():
    c = read_claim(_claim([{"name": "r", "firstAvailable": [
        {"name": "a", "deviceClassName": "gpu", "adminAccess": True},
        {"name": "b", "deviceClassName": "mig"}]}]))
    ((a, b),) = c.requests
    assert (a.name, a.base, a.sub, a.admin) == ("r/a", "r", "a", False)
    assert (b.name, b.class_name) == ("r/b", "mig")


def test_a_constraint_applies_to_the_requests_it_names_by_base_or_full_name():
    c = read_claim(_claim([{"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "gpu"}]},
                           {"name": "s", "exactly": {"deviceClassName": "gpu"}}],
                          constraints=[{"matchAttribute": "d/x", "requests": ["r/a"]},
                                       {"distinctAttribute": "d/y"}]))
    ((ra,), (s,)) = c.requests
    named, every = c.constraints
    assert named.applies(ra) and not named.applies(s) and not named.distinct
    assert every.applies(ra) and every.applies(s) and every.distinct
    assert model.Constraint(frozenset({"r"}), "d/x", False).applies(ra)


def test_an_object_whose_metadata_is_not_a_map_is_refused_not_a_crash():
    with pytest.raises(ModelError, match=r"^ResourceSlice \?: spec is missing or not a dict$"):
        read_slice({"metadata": [1], "spec": "x"})
    with pytest.raises(ModelError, match=r"^ResourceClaim \?: spec: expected an object, got str 'x'$"):
        read_claim({"metadata": "x", "spec": "x"})
    assert model.object_name({"metadata": [1]}) == "?"


def test_a_missing_key_error_without_its_key_keeps_its_words():
    # cel-python names the key in its error's arguments; an error that carries none is not worded "None"
    assert cel._explain(celpy.CELEvalError("no such key", KeyError, ())) == "no such key"
    assert cel._explain(celpy.CELEvalError("no such key", KeyError, ("gpu",))) == "no such key: gpu"
    assert cel._explain(celpy.CELEvalError("no such key: 'gpu'", KeyError, ("gpu",))) == "no such key: 'gpu'"
