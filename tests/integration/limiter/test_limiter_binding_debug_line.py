"""At debug level the limiter says, once per GPU, what bound it: the claim region and the device index of the
limits file that names it, or no limit. It is what an operator reads to see why a GPU of a container is or is
not limited (a claim's GPU found by its UUID sits at another CUDA ordinal than its index in the claim)."""

from __future__ import annotations

import json
import re

MIB = 1 << 20


def test_each_gpu_is_logged_with_its_claim_device_or_no_limit(claim):
    probe = claim("probe", gpus="2xT4")
    uuids = json.loads(probe.run("uuids", CUDA_VISIBLE_DEVICES="0,1").stdout)
    # the claim's one device (index 0 of its limits file) is GPU 1, named by UUID; GPU 0 is no claim's
    c = claim(gpus="2xT4").create(memory=64 * MIB, uuid=uuids[1])
    out = c.run("alloc", str(1 * MIB), CARVE_LOG="debug", CUDA_VISIBLE_DEVICES="0,1")
    assert out.stdout.strip() == "0", out.stderr
    lines = re.findall(r"^carve-limiter\[\d+\] debug: (device \d .*)$", out.stderr, re.M)
    assert f"device 0 ({uuids[0]}): no limit" in lines, out.stderr
    assert f"device 1 ({uuids[1]}): {c.region} device 0" in lines, out.stderr
