"""50 claims prepared and unprepared in parallel calls: no lost or duplicated state."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

from support.plugin_harness import result

from driver import names


def test_fifty_claims_in_parallel(node, kubelet, plugin_factory):
    plugin_factory("0=soft,1=soft,exclusive", extra=("--split-count", "64"))
    claims = [
        node.put_claim(
            f"c{i}", [result("s", f"gpu-{i % 2}", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi"})]
        )
        for i in range(50)
    ]
    with ThreadPoolExecutor(50) as pool:
        outs = list(pool.map(lambda c: kubelet.prepare([c]), claims))
        # A second wave of the same claims, concurrently: answered from state, nothing written twice.
        again = list(pool.map(lambda c: kubelet.prepare([c]), claims))
    assert outs == again
    for c, out in zip(claims, outs, strict=True):
        assert out[c[2]]["error"] == ""
        assert out[c[2]]["devices"][0][3] == [
            names.cdi_device_id(c[2], f"gpu-{int(c[1][1:]) % 2}", out[c[2]]["devices"][0][4])
        ]
    assert node.spec_files() == sorted(names.cdi_spec_file_name(c[2]) for c in claims)
    assert sorted(node.checkpoint_claims()) == sorted(c[2] for c in claims)
    assert sorted(node.claim_dirs()) == sorted(c[2] for c in claims)

    with ThreadPoolExecutor(50) as pool:
        errors = list(pool.map(lambda c: kubelet.unprepare([c]), claims))
    assert all(e == {c[2]: ""} for c, e in zip(claims, errors, strict=True))
    assert node.leftovers() == {"specs": [], "claim_dirs": [], "checkpoint": {}}
