"""Small hand-written slices, classes and claims for allocator tests, returned as carve reads them from a
file or the API server: decoded from JSON. So their strings are the parser's, not this module's literals,
which CPython interns: a test fed literals passes where the code compares strings with `is` instead of
`==` (generated mutants of driver/allocator survived that way: a toleration's operator, a config's
`requests` key)."""

from __future__ import annotations

import json

DRIVER = "gpu.carve.dev"


def _parsed(obj):
    return json.loads(json.dumps(obj))


def dev(name, type_="gpu", uuid=None, memory=None, multi=False, policy=None, consumes=None, taints=None,
        **attrs):
    d = {"name": name, "attributes": {"type": {"string": type_}, "uuid": {"string": uuid or name}}}
    for k, v in attrs.items():
        key = {bool: "bool", int: "int", str: "string"}[type(v)]
        d["attributes"][k] = {key: v}
    if memory:
        d["capacity"] = {"memory": {"value": memory, **({"requestPolicy": policy} if policy else {})}}
    if multi:
        d["allowMultipleAllocations"] = True
    if consumes:
        d["consumesCounters"] = consumes
    if taints:
        d["taints"] = taints
    return d


def slice_(name, devices, node="n1", pool=None, generation=1, count=1, counters=None, driver=DRIVER):
    spec = {"driver": driver, "pool": {"name": pool or node or "shared", "generation": generation,
                                       "resourceSliceCount": count}, "devices": devices}
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    if counters:
        spec["sharedCounters"] = counters
    return _parsed({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
                    "spec": spec})


def klass(name, type_=None, config=None, expr=None):
    sel = expr or f'device.attributes["{DRIVER}"].type == "{type_ or name}"'
    spec = {"selectors": [{"cel": {"expression": sel}}]}
    if config:
        spec["config"] = config
    return _parsed({"metadata": {"name": name}, "spec": spec})


def exactly(name, cls="gpu", count=None, mode=None, selectors=(), capacity=None, admin=None,
            tolerations=None):
    e = {"deviceClassName": cls}
    if count is not None:
        e["count"] = count
    if mode:
        e["allocationMode"] = mode
    if selectors:
        e["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if capacity:
        e["capacity"] = {"requests": capacity}
    if admin:
        e["adminAccess"] = True
    if tolerations:
        e["tolerations"] = tolerations
    return {"name": name, "exactly": e}


def claim(name, *requests, constraints=None, config=None, uid=None):
    c = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": name, "namespace": "default"},
         "spec": {"devices": {"requests": list(requests)}}}
    if uid:
        c["metadata"]["uid"] = uid
    if constraints:
        c["spec"]["devices"]["constraints"] = constraints
    if config:
        c["spec"]["devices"]["config"] = config
    return _parsed(c)


def devices_of(allocation):
    return [(r["request"], r["pool"], r["device"]) for r in allocation["devices"]["results"]]


CLASSES = [klass("gpu"), klass("vgpu"), klass("mig")]
