"""A selector reading another domain than the driver's (`device.attributes["vendor.example"].type`) reads
that domain's attribute only: a device that has the name only bare (in the driver's domain) lacks it there,
and the selector cache keeps such a device apart from one that has it, whether the domain sorts before or
after the driver's."""

from __future__ import annotations

import pytest
from support.decoded import read_slice

from driver.allocator import cel
from driver.allocator.cel_cache import SelectorCache

DRIVER = "gpu.carve.dev"


def devices(*attributes):
    return read_slice({"metadata": {"name": "s"}, "spec": {
        "driver": DRIVER, "nodeName": "n", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": f"d{i}", "attributes": a} for i, a in enumerate(attributes)]}}).devices


@pytest.mark.parametrize("domain", ["a.example", "vendor.example"], ids=["before", "after"])
def test_a_name_the_device_has_only_bare_is_missing_from_another_domain(domain):
    gpu = {"string": "gpu"}
    devs = devices({"type": gpu}, {"type": gpu, f"{domain}/type": gpu}, {f"{domain}/type": gpu})
    cache = SelectorCache()
    answers = []
    for d in devs:
        try:
            answers.append(cache.matches(f'device.attributes["{domain}"].type == "gpu"', d))
        except cel.CelError as e:
            answers.append(e.message)
    assert answers == ["CEL runtime error: no such key: 'type'", True, True]
    assert cache.evaluations == 2  # the second and third device read the same input
