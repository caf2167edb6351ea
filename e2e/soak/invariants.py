"""What must hold through the soak, each check returning the violations it found (empty: it holds).

- capacity: no device allocated beyond what it offers (one claim per exclusive device; consumed memory and
  cores of shared devices within their capacity), read from the API server's claims and slices;
- quota: in a long-lived soft-slice container, an allocation past its memory quota is refused (the fake
  libcuda through the limiter), after every fault;
- leaks, at the end, with every pod and claim gone: no CDI spec, claim directory, checkpoint entry or MIG
  instance left on any node, and no container of the soak's pods left in any node's containerd;
- outcome: every pod ran, or never ran with Events that say why;
- plugin logs, at the end: no internal error (every claim error is one that names its cause), and a node's
  checkpoint found corrupt only as often as the soak corrupted it (a torn write must never corrupt it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from kubernetes import client

from driver import names
from driver.devices.attributes import parse_quantity
from driver.plugin.state.checkpoint import Checkpoint
from e2e import kube
from e2e.cluster.launcher import NAMESPACE as RELEASE_NAMESPACE
from e2e.cluster.launcher import Cluster
from e2e.cluster.nodes import Node
from e2e.soak.workload import SoakPod

MiB = 1024**2
CUDA_ERROR_OUT_OF_MEMORY = 2


def capacity(api: client.ApiClient) -> list[str]:
    resource = client.CustomObjectsApi(api)
    slices = resource.list_cluster_custom_object(kube.GROUP, kube.VERSION, "resourceslices")["items"]
    devices = {}
    for s in slices:
        if s["spec"].get("driver") != names.DRIVER_NAME:
            continue
        for d in s["spec"].get("devices") or []:
            devices[(s["spec"]["pool"]["name"], d["name"])] = d
    claims = resource.list_cluster_custom_object(kube.GROUP, kube.VERSION, "resourceclaims")["items"]
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    used: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for claim in claims:
        alloc = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        for r in alloc.get("results") or []:
            if r.get("driver") != names.DRIVER_NAME or r.get("adminAccess"):
                continue
            key = (r["pool"], r["device"])
            holders[key].append(f"{claim['metadata']['namespace']}/{claim['metadata']['name']}")
            for cap, q in (r.get("consumedCapacity") or {}).items():
                used[key][cap] += parse_quantity(q)
    problems = []
    for key, who in holders.items():
        device = devices.get(key)
        if device is None:
            continue  # republished without it since (a fallback): not an over-allocation
        if not device.get("allowMultipleAllocations") and len(who) > 1:
            problems.append(f"capacity: {key[0]}/{key[1]} is exclusive but allocated to {sorted(who)}")
        for cap, total in used[key].items():
            offered = parse_quantity(((device.get("capacity") or {}).get(cap) or {}).get("value", "0"))
            if total > offered:
                problems.append(f"capacity: {key[0]}/{key[1]} {cap}: {total} consumed of {offered}")
    return problems


def quota(c: Cluster, namespace: str, pod: str) -> list[str]:
    """The long-lived soft pod is refused an allocation past its quota and granted one under it."""
    env = kube.container_env(c, namespace, pod)
    limit = int(env[f"{names.ENV_MEMORY_LIMIT}_0"])
    over = kube.cuda_probe(c, namespace, pod, limit + 64 * MiB)
    under = kube.cuda_probe(c, namespace, pod, limit // 2)
    problems = []
    if over.get("alloc") != CUDA_ERROR_OUT_OF_MEMORY or over.get("limiter") is not True:
        problems.append(f"quota: {namespace}/{pod} over its {limit} B quota: {over}")
    if under.get("alloc") != 0:
        problems.append(f"quota: {namespace}/{pod} under its {limit} B quota: {under}")
    return problems


def mig_instances(node: Node) -> list[str]:
    env = {**os.environ, names.ENV_FAKE_STATE: str(node.fake_state)}
    argv = [str(Path(sys.executable).parent / "carve"), "inspect", "-o", "json"]
    argv += ["--gpus", node.spec.gpus, "--node-name", node.name]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return [i["uuid"] for g in json.loads(done.stdout)["gpus"] for i in g.get("mig_instances") or []]


def leaks(c: Cluster, namespace: str) -> list[str]:
    """What the soak's pods left behind on the nodes once the API server holds none of them."""
    problems = []
    for node in c.nodes.values():
        # The legacy shim's node: its records are checked below. (Not `node.plugin is None`: that is also
        # every node whose plugin runs in the chart's DaemonSet, whose leaks this must see.)
        if node.spec.strategy == "legacy":
            continue
        specs = [p.name for p in node.cdi_dir.glob("k8s.gpu.carve.dev-claim_*.json")]
        if specs:
            problems.append(f"leak: {node.name}: CDI specs {specs}")
        # The run directory's, and the plugin directory's where a plugin before --run-dir put them.
        dirs = sorted(
            p.name
            for claims_dir in (node.run_dir / "claims", node.plugin_dir / "claims")
            if claims_dir.exists()
            for p in claims_dir.iterdir()
        )
        if dirs:
            problems.append(f"leak: {node.name}: claim directories {dirs}")
        loaded = Checkpoint(node.plugin_dir / names.CHECKPOINT_FILE, "").load(move_aside=False)
        if loaded.claims:
            problems.append(f"leak: {node.name}: checkpoint entries {sorted(loaded.claims)}")
        migs = mig_instances(node)
        if migs:
            problems.append(f"leak: {node.name}: MIG instances {migs}")
        if node.containerd:
            # the soak's only: the chart's own pods (no carve image in host mode) are not the soak's
            left = sorted(
                f"{x['pod']}/{x['name']}"
                for x in node.containerd.created_containers()
                if x["namespace"] == namespace
            )
            if left:
                problems.append(f"leak: {node.name}: containers of deleted pods {left}")
    # The legacy shim's assignment records: the extender's leader collects those of pods that are gone.
    core = client.CoreV1Api(c.api())
    records = core.list_namespaced_config_map(
        RELEASE_NAMESPACE, label_selector=f"{names.LEGACY_RECORD_LABEL}=true"
    )
    mine = sorted(
        cm.metadata.name
        for cm in records.items
        if json.loads((cm.data or {}).get("assignment") or "{}").get("namespace") == namespace
    )
    if mine:
        problems.append(f"leak: legacy assignment records of deleted pods {mine}")
    return problems


def outcomes(pods: dict[str, SoakPod]) -> list[str]:
    return [
        f"outcome: pod {p.name} ({p.kind}) never ran and no Event says why"
        for p in pods.values()
        if not p.ran and not p.why_not
    ]


def plugin_logs(c: Cluster, corrupted: dict[str, int]) -> list[str]:
    """`corrupted`: node -> how many times the corrupt-checkpoint fault hit it."""
    problems = []
    for node in c.nodes.values():
        if not node.plugin:
            continue
        text = node.plugin.log.read_text(errors="replace")
        internal = [line for line in text.splitlines() if "event=internal.error" in line]
        if internal:
            problems.append(f"plugin log: {node.name}: {len(internal)} internal errors, first: {internal[0]}")
        found = text.count("event=checkpoint.corrupt")
        if found > corrupted.get(node.name, 0):
            problems.append(
                f"plugin log: {node.name}: checkpoint found corrupt {found} times, "
                f"the soak corrupted it {corrupted.get(node.name, 0)} times"
            )
    return problems
