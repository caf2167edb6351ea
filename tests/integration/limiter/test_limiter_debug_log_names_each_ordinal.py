"""At debug level the limiter logs what limits each CUDA ordinal once it has bound them (binding.c,
resolve): one line per ordinal the driver counts, from 0, with the GPU's UUID and the claim's region and
device index, or "no limit" for a GPU no claim names. An operator reads these lines to see which claim a
process was held to.

The claim names GPU 0 of two fake GPUs: ordinal 0 is its device 0, ordinal 1 has no limit; then a claim
whose one device is GPU 1, named by UUID: ordinal 1 is that claim's device 0."""

from __future__ import annotations

import json
import re

MIB = 1 << 20
BOUND = re.compile(r"debug: device (-?\d+) \(([^)]*)\): (.*)$")


def test_each_ordinal_is_logged_once_with_what_limits_it(claim) -> None:
    c = claim(gpus="2xT4").create(memory=64 * MIB)
    uuids = json.loads(c.run("uuids", CUDA_VISIBLE_DEVICES="0,1").stdout)
    out = c.run("alloc", str(MIB), CARVE_LOG="debug", CUDA_VISIBLE_DEVICES="0,1")
    assert out.stdout.strip() == "0", out.stderr
    lines = [m.groups() for m in map(BOUND.search, out.stderr.splitlines()) if m]
    assert lines == [
        ("0", uuids[0], f"{c.region} device 0"),
        ("1", uuids[1], "no limit"),
    ], out.stderr


def test_a_gpu_named_by_uuid_is_logged_with_the_claims_device_index(claim) -> None:
    uuids = json.loads(claim("probe", gpus="2xT4").run("uuids", CUDA_VISIBLE_DEVICES="0,1").stdout)
    c = claim(gpus="2xT4").create(memory=64 * MIB, uuid=uuids[1])
    out = c.run("alloc", str(MIB), CARVE_LOG="debug", CUDA_VISIBLE_DEVICES="0,1")
    assert out.stdout.strip() == "0", out.stderr
    lines = [m.groups() for m in map(BOUND.search, out.stderr.splitlines()) if m]
    assert lines == [
        ("0", uuids[0], "no limit"),
        ("1", uuids[1], f"{c.region} device 0"),
    ], out.stderr
