"""Differential: `carve allocate`'s allocator and the real kube-scheduler must agree, claim by claim, on
which claims of a seeded random case can be allocated.

Each case is a node object without a kubelet (nothing prepares; only scheduling is compared) carrying
slices built by carve's device model, and claims offered one at a time. For claim i carve answers with the
scheduler's own allocations of claims 0..i-1 in use, so a different but equally valid device choice
earlier does not count as a disagreement. CARVE_E2E_DIFF_CASES sets the number of cases (default 20;
the issue asks for 200: `CARVE_E2E_DIFF_CASES=200 make e2e`), CARVE_E2E_DIFF_SEED the first seed."""

from __future__ import annotations

import os

import pytest
import yaml
from kubernetes import client

from driver.allocator.allocator import Unallocatable, allocate
from e2e import differential, kube

CASES = int(os.environ.get("CARVE_E2E_DIFF_CASES", "20"))
FIRST_SEED = int(os.environ.get("CARVE_E2E_DIFF_SEED", "1000"))
G, V = "resource.k8s.io", "v1"


def _node(api, name: str) -> None:
    core = client.CoreV1Api(api)
    core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
    alloc = {"pods": "110", "cpu": "8", "memory": "32Gi"}
    core.patch_node_status(
        name,
        {
            "status": {
                "capacity": alloc,
                "allocatable": alloc,
                "conditions": [{"type": "Ready", "status": "True", "reason": "E2E", "message": "no kubelet"}],
            }
        },
    )


def _pod(name: str, claim: str, node: str) -> dict:
    p = kube.pod(name, claim=claim, node=node)
    p["spec"]["tolerations"] = [{"operator": "Exists"}]  # not-ready/unreachable: the node has no kubelet
    return p


def _run_case(api, namespace: str, case: differential.Case) -> list[str]:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    _node(api, case.node)
    disagreements = []
    try:
        for s in case.slices:
            custom.create_cluster_custom_object(G, V, "resourceslices", s)
        # What the API server stored (defaults applied) is what both sides read.
        slices = [
            s
            for s in custom.list_cluster_custom_object(G, V, "resourceslices")["items"]
            if s["spec"].get("nodeName") == case.node
        ]
        classes = custom.list_cluster_custom_object(G, V, "deviceclasses")["items"]
        in_use: list[dict] = []
        for claim in case.claims:
            name = f"{case.node}-{claim['metadata']['name']}"
            claim = {**claim, "metadata": {"name": name, "namespace": namespace}}
            custom.create_namespaced_custom_object(G, V, namespace, "resourceclaims", claim)
            core.create_namespaced_pod(namespace, _pod(name, name, case.node))
            decision = kube.wait_outcome(api, namespace, name)
            try:
                allocate(claim, slices, classes, in_use, node=case.node)
                carve = "allocates"
                reason = ""
            except Unallocatable as e:
                carve, reason = "cannot allocate", e.reason
            scheduler = "allocates" if decision[0] == "scheduled" else "cannot allocate"
            if carve != scheduler:
                disagreements.append(
                    f"seed {case.seed} ({case.layout}) claim {name}: carve {carve} ({reason}), "
                    f"scheduler {scheduler} ({decision[1]})\n{yaml.safe_dump(claim['spec'])}"
                )
            if decision[0] == "scheduled":
                stored = kube.wait(
                    f"claim {name} allocated",
                    lambda n=name: (
                        (c := custom.get_namespaced_custom_object(G, V, namespace, "resourceclaims", n))
                        .get("status", {})
                        .get("allocation")
                        and c
                    ),
                )
                in_use.append(stored)
    finally:
        for p in core.list_namespaced_pod(namespace).items:
            core.delete_namespaced_pod(p.metadata.name, namespace, grace_period_seconds=0)
        core.delete_node(case.node)
        for s in custom.list_cluster_custom_object(G, V, "resourceslices")["items"]:
            if s["spec"].get("nodeName") == case.node:
                custom.delete_cluster_custom_object(G, V, "resourceslices", s["metadata"]["name"])
    return disagreements


def test_carve_allocate_agrees_with_the_scheduler(cluster, request, api, namespace):
    if cluster.version.capacity_check_bug:
        # carve allocates by the devices' own capacity; the 1.34 scheduler does not (seeds 1000, 1002, 1016
        # of the default 20 disagree on soft claims, each explained by the bug).
        request.applymarker(pytest.mark.xfail(strict=True, reason=cluster.version.capacity_check_bug))
    found = []
    total = 0
    for seed in range(FIRST_SEED, FIRST_SEED + CASES):
        case = differential.case(seed, cluster.version.minor, cluster.version.gates_on)
        found += _run_case(api, namespace, case)
        total += len(case.claims)
    print(
        f"\ndifferential: {CASES} cases, {total} claims on {cluster.version.label}; "
        f"{len(found)} disagreements"
    )
    assert not found, "\n\n".join(found)
