"""What decoding API lists one object at a time with a nesting limit costs (driver/cluster/decode.py).

A ResourceClaim list of 2000 claims, each with small opaque parameters, decoded three ways in the same run:
`json.loads` of the whole document (the baseline: what list_objects did before), `decode_list`'s fast path
(the same json.loads plus the iterative depth check of every object), and `decode_list`'s slow path (the
list holds one claim nested 5000 deep, so json.loads fails and the items are split by a scan and decoded
one by one). Prints each as a ratio to the baseline; asserts only that the work was done (every good claim
returned, the bad one named), never a time.
"""

from __future__ import annotations

import json
import time

from driver.cluster.decode import decode_list

CLAIMS = 2000


def claim(i: int) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"c{i}",
            "namespace": "ns",
            "uid": f"uid-{i}",
            "resourceVersion": str(i),
            "labels": {"app": "inference", "tier": str(i % 3)},
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "vgpu.carve.dev",
                            "capacity": {"requests": {"memory": "8Gi", "cores": "30"}},
                            "selectors": [
                                {"cel": {"expression": 'device.attributes["gpu.carve.dev"].type == "vgpu"'}}
                            ],
                        },
                    }
                ],
                "config": [
                    {
                        "requests": ["gpu"],
                        "opaque": {
                            "driver": "gpu.carve.dev",
                            "parameters": {
                                "apiVersion": "gpu.carve.dev/v1alpha1",
                                "kind": "SoftConfig",
                                "corePolicy": "force",
                            },
                        },
                    }
                ],
            }
        },
        "status": {},
    }


def best(fn, n: int = 5) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def test_decode_cost_against_plain_json_loads():
    items = [json.dumps(claim(i)) for i in range(CLAIMS)]
    good = (
        '{"kind": "ResourceClaimList", "metadata": {"resourceVersion": "9"}, "items": ['
        + ",".join(items)
        + "]}"
    )
    deep = json.dumps(claim(CLAIMS)).replace('"status": {}', '"status": ' + "[" * 5000 + "]" * 5000)
    bad = good[:-2] + "," + deep + "]}"
    baseline = best(lambda: json.loads(good))
    fast = best(lambda: decode_list(good))
    slow = best(lambda: decode_list(bad))
    _, got, left_out = decode_list(bad)
    assert len(got) == CLAIMS and [b.name for b in left_out] == [f"c{CLAIMS}"]
    assert len(decode_list(good)[1]) == CLAIMS
    print(
        f"\ndecode {CLAIMS} claims ({len(good) / 1e6:.1f} MB): json.loads {baseline * 1e3:.1f} ms; "
        f"decode_list fast path {fast / baseline:.1f}x; slow path (a claim 5000 deep) {slow / baseline:.1f}x"
    )
