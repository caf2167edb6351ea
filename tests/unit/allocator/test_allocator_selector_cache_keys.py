"""The selector cache (cel_cache.SelectorCache) as the allocator and the throughput benchmark see it: the
same answer as evaluating each device, one evaluation per distinct input, errors remembered, results
keyed by a device dropped with its pool generation, and the counts the benchmark prints."""

from __future__ import annotations

import pytest
from support.decoded import read_slice

from driver.allocator import cel
from driver.allocator.cel_cache import SelectorCache, input_key

DRIVER = "gpu.carve.dev"
TYPE = f'device.attributes["{DRIVER}"].type'


def devices(*raws, driver=DRIVER, generation=1):
    return read_slice({"metadata": {"name": "s"}, "spec": {
        "driver": driver, "nodeName": "n",
        "pool": {"name": "p", "generation": generation, "resourceSliceCount": 1},
        "devices": [dict(r, name=f"d{i}") for i, r in enumerate(raws)]}}).devices


def attrs(**values):
    return {"attributes": dict(values)}


def answers(cache, expression, devs):
    out = []
    for d in devs:
        try:
            out.append(cache.matches(expression, d))
        except cel.CelError as e:
            out.append(e.message)
    return out


def uncached(expression, devs):
    out = []
    for d in devs:
        try:
            out.append(cel.evaluate(expression, d.cel_value()))
        except cel.CelError as e:
            out.append(e.message)
    return out


@pytest.mark.parametrize(("expression", "raws", "evaluations"), [
    # values of another type are other inputs, though they print alike
    (f"{TYPE} == 1", [attrs(type={"int": 1}), attrs(type={"string": "1"}), attrs(type={"bool": True}),
                      attrs(type={"int": 1})], 3),
    # a raw attribute Python cannot hash (an unknown field holding a list) is keyed by what it prints
    (f'{TYPE} == "a"', [attrs(type={"string": "a", "note": ["x"]}),
                        attrs(type={"string": "a", "note": ["y"]}),
                        attrs(type={"string": "a", "note": ["x"]}), attrs(type={"string": "a"})], 3),
    # both spellings of a name in the driver's domain: the qualified one is what selectors see
    (f'{TYPE} == "gpu"', [attrs(type={"string": "mig"}, **{f"{DRIVER}/type": {"string": "gpu"}}),
                          attrs(type={"string": "mig"}), attrs(**{f"{DRIVER}/type": {"string": "gpu"}}),
                          attrs(type={"string": "gpu"})], 2),
    # a name with a "/" read from the driver's domain: no attribute has one there (an "example.com/rack" is
    # example.com's rack), so these devices all read it as missing, one input whatever their racks
    (f'device.attributes["{DRIVER}"]["example.com/rack"] == "x"',
     [attrs(**{"example.com/rack": {"string": "x"}}), attrs(),
      attrs(**{f"{DRIVER}/example.com/rack": {"string": "x"}}),
      attrs(**{"example.com/rack": {"string": "y"}})], 1),
    # a missing attribute is an input of its own (an error), not the empty string's
    (f'{TYPE} == ""', [attrs(type={"string": ""}), attrs(), attrs(other={"string": ""})], 2),
    # a capacity: by its value's type and text
    (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("1Gi")) >= 0',
     [{"capacity": {"memory": {"value": "1Gi"}}}, {"capacity": {"memory": {"value": "1024Mi"}}},
      {"capacity": {"memory": {"value": "1Gi"}}}, {"capacity": {}}], 3),
    # a whole domain map: its names and values, in order
    (f'size(device.attributes["{DRIVER}"]) == 1',
     [attrs(a={"int": 1}), attrs(a={"int": 2}), attrs(a={"int": 1}), attrs(a={"int": 1}, b={"int": 1})], 3),
    (f'"a" in device.attributes["{DRIVER}"]',
     [attrs(a={"int": 1}), attrs(b={"int": 1}), attrs(a={"int": 1}), attrs()], 3),
    (f'size(device.capacity["{DRIVER}"]) == 1',
     [{"capacity": {"m": {"value": "1"}}}, {"capacity": {"m": {"value": "2"}}},
      {"capacity": {"m": {"value": "1"}}}], 2),
    ("device.allowMultipleAllocations", [{"allowMultipleAllocations": True}, {}, {}], 2),
])
def test_the_cache_answers_as_each_device_and_evaluates_once_per_input(expression, raws, evaluations):
    devs = devices(*raws)
    cache = SelectorCache()
    assert answers(cache, expression, devs) == uncached(expression, devs)
    assert cache.evaluations == evaluations
    assert cache.misses == evaluations
    assert cache.hits == len(devs) - evaluations
    # asked again: every answer from the cache, the same
    assert answers(cache, expression, devs) == uncached(expression, devs)
    assert cache.evaluations == evaluations
    assert cache.hits == 2 * len(devs) - evaluations


def test_devices_of_other_drivers_are_other_inputs():
    mine, theirs = devices(attrs(type={"string": "x"}))[0], devices(attrs(type={"string": "x"}),
                                                                   driver="other.dev")[0]
    cache = SelectorCache()
    expression = f'device.driver == "{DRIVER}" && {TYPE} == "x"'
    assert cache.matches(expression, mine) is True
    assert cache.matches(expression, theirs) is False  # false && (no such key) is false
    with pytest.raises(cel.CelError, match="no such key"):
        cache.matches(f'{TYPE} == "x"', theirs)  # its attributes are in its own domain
    assert cache.evaluations == 3


def test_an_error_is_remembered_and_raised_again_without_evaluating():
    d = devices(attrs())[0]
    cache = SelectorCache()
    with pytest.raises(cel.CelError) as first:
        cache.matches(f'{TYPE} == "x"', d)
    with pytest.raises(cel.CelError) as second:
        cache.matches(f'{TYPE} == "x"', d)
    assert second.value is first.value
    assert (cache.evaluations, cache.hits, cache.misses, len(cache)) == (1, 1, 1, 1)


def test_a_false_answer_is_remembered_too():
    d = devices(attrs(type={"string": "y"}))[0]
    cache = SelectorCache()
    assert cache.matches(f'{TYPE} == "x"', d) is False
    assert cache.matches(f'{TYPE} == "x"', d) is False
    assert (cache.evaluations, cache.hits) == (1, 1)


def test_a_disabled_cache_evaluates_every_time_and_keeps_nothing():
    devs = devices(attrs(type={"string": "x"}), attrs(type={"string": "x"}))
    cache = SelectorCache(enabled=False)
    assert answers(cache, f'{TYPE} == "x"', devs * 2) == [True] * 4
    assert (cache.evaluations, cache.hits, cache.misses, len(cache)) == (4, 0, 0, 0)


def test_results_keyed_by_a_device_go_with_its_generation_and_input_keyed_ones_stay():
    old = devices(attrs(type={"string": "x"}), generation=1)[0]
    cache = SelectorCache()
    anything = f'size(device.attributes) > 0 && {TYPE} == "x"'  # may read anything: keyed by the device
    assert cel.compile_selector(anything).reads is None
    assert cache.matches(anything, old) is True
    assert cache.matches(f'{TYPE} == "x"', old) is True
    assert len(cache) == 2
    cache.forget(lambda key: key[2] != 1)  # drop generation 1
    assert len(cache) == 1
    assert cache.matches(f'{TYPE} == "x"', old) is True
    assert cache.evaluations == 2  # the input-keyed result stayed
    assert cache.matches(anything, old) is True
    assert cache.evaluations == 3  # the device-keyed one was evaluated again
    cache.forget(lambda key: True)
    assert len(cache) == 2


def test_the_fast_path_answers_are_counted_and_switch_off(monkeypatch):
    devs = devices(attrs(type={"string": "x"}), attrs(type={"string": "y"}))
    cache = SelectorCache()
    assert answers(cache, f'{TYPE} == "x"', devs) == [True, False]
    assert cache.fast_answers == 2
    assert answers(cache, f'{TYPE}.startsWith("x")', devs) == [True, False]  # not a fast-path shape
    assert cache.fast_answers == 2
    monkeypatch.setattr(cel.Runners, "fast", False)
    slow = SelectorCache()
    assert answers(slow, f'{TYPE} == "x"', devs) == [True, False]
    assert slow.fast_answers == 0


def test_an_input_key_is_remembered_per_read_set_on_the_device():
    d = devices(attrs(type={"string": "x"}))[0]
    program = cel.compile_selector(f'{TYPE} == "x"')
    key = input_key(program.reads, d, program.reads_id)
    assert d.input_keys[program.reads_id] is key
    assert input_key(program.reads, d, program.reads_id) is key
    assert input_key(program.reads, d) == key
