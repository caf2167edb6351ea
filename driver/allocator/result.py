"""Turning a found set of devices into `status.allocation` (resource.k8s.io/v1 JSON shape).

Results carry request ("req" or "req/sub"), driver, pool, device, and where they apply
adminAccess, tolerations, shareID and consumedCapacity (only for devices that allow multiple
allocations, every capacity of the device). Config lists each used class's config once
(source FromClass) and the claim's config entries that apply to an allocated request (FromClaim);
an entry that applies to every request has its request list dropped ("empty means all"). The node
selector pins the node when any device is node-local.
"""

from __future__ import annotations

from collections.abc import Mapping

from driver.allocator.capacity import format_consumed
from driver.allocator.model import Claim, DeviceClass, share_id
from driver.allocator.search import Pick


def build(claim: Claim, picks: list[Pick], classes: Mapping[str, DeviceClass], node: str | None) -> dict:
    results = []
    for i, p in enumerate(picks):
        r: dict = {"request": p.request.name, "driver": p.device.driver, "pool": p.device.pool,
                   "device": p.device.name}
        if p.request.admin:
            r["adminAccess"] = True
        if p.request.tolerations:
            r["tolerations"] = [dict(t) for t in p.request.tolerations]
        if p.device.binding_conditions:
            r["bindingConditions"] = list(p.device.binding_conditions)
            r["bindingFailureConditions"] = list(p.device.binding_failure_conditions)
        if p.consumed is not None:
            r["shareID"] = share_id(claim.uid, i)
            if p.consumed:
                r["consumedCapacity"] = format_consumed(p.device, p.consumed)
        results.append(r)
    allocation: dict = {"devices": {"results": results, "config": _config(claim, picks, classes)}}
    selector = _node_selector(picks, node)
    if selector:
        allocation["nodeSelector"] = selector
    return allocation


def _config(claim: Claim, picks: list[Pick], classes: Mapping[str, DeviceClass]) -> list[dict]:
    # base request name -> the (sub)request that was allocated; every request has a pick (allocationMode
    # All succeeds only with at least one device)
    chosen = {}
    for p in picks:
        chosen.setdefault(p.request.base, p.request)
    order = [alts[0].base for alts in claim.requests]
    out: list[dict] = []
    by_class: dict[str, list[dict]] = {}
    for base in order:
        req = chosen[base]
        dc = classes[req.class_name]  # Allocator.allocate refused a claim naming a missing class
        if dc.name in by_class:
            for entry in by_class[dc.name]:
                entry["requests"].append(req.name)
            continue
        entries = [{"source": "FromClass", "requests": [req.name], **dict(c)} for c in dc.config]
        by_class[dc.name] = entries
        out.extend(entries)
    names = {base: {base, chosen[base].name} for base in order}
    for c in claim.config:
        wanted = list(c.get("requests") or ())
        if not wanted or any(n in wanted for base in order for n in names[base]):
            entry = {"source": "FromClaim", **{k: v for k, v in c.items() if k != "requests"}}
            if wanted:
                entry["requests"] = wanted
            out.append(entry)
    for entry in out:
        wanted = entry.get("requests")
        if wanted and all(names[base] & set(wanted) for base in order):
            del entry["requests"]
    # Keep a stable key order: source, requests, then the configuration itself.
    return [{k: e[k] for k in ("source", "requests") if k in e} | {k: v for k, v in e.items()
                                                                   if k not in ("source", "requests")}
            for e in out]


def _node_selector(picks: list[Pick], node: str | None) -> dict | None:
    terms: dict[str, list] = {"matchFields": [], "matchExpressions": []}
    for p in picks:
        if p.device.node_name or p.device.binds_to_node:
            return {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [p.device.node_name or node]}]}]}
        sel = p.device.node_selector
        if sel and len(sel.get("nodeSelectorTerms") or ()) == 1:
            term = sel["nodeSelectorTerms"][0]
            for kind in terms:
                for req in term.get(kind) or ():
                    if req not in terms[kind]:
                        terms[kind].append(req)
    term = {k: v for k, v in terms.items() if v}
    return {"nodeSelectorTerms": [term]} if term else None
