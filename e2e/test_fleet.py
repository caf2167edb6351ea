"""A fleet of mixed GPU models under one chart (issue 18, docs/configuration.md "Strategy rules",
docs/controller.md "Pinning").

1. One chart value for every node: a cluster of its own with a T4 node and an A100 node, the chart's plugin
   DaemonSet on each (the image `make image` builds, as in test_daemonset.py) installed with
   `plugin.strategy=mig`. Both plugin pods are Ready and never restarted; the A100 publishes its MIG
   devices; the T4 (no MIG) runs the fallback (soft) and the plugin says so with a `StrategyFallback`
   Event on its Node.
2. The admin's choice is kept: on the session's cluster, a node whose plugin runs `0=soft,soft` (GPU 0
   pinned by its index rule, GPU 1 left to the controller) and `carve controller` given the same rules; a
   MIG claim no GPU can serve makes the controller switch GPU 1, never GPU 0, and the plugin's
   NodePartitioning status says who set each (`pinned`, `controller`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from kubernetes import client

from e2e import kube
from e2e.cluster.controller import GROUP, VERSION, StrategyController
from e2e.cluster.launcher import Cluster
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.versions import resolve
from e2e.sessions import cluster_session

T4, A100 = "e2e-t4", "e2e-a100"
STRATEGY = "mig"  # the one chart value (plugin.strategy) every node gets
PINNED_NODE = NodeSpec("e2e-p1", "fake:2xA100-80GB", "0=soft,soft")


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _types(cluster: Cluster, node: str) -> set[str]:
    return {
        next(iter(d["attributes"]["type"].values()))
        for s in cluster.slices(node)
        for d in s["spec"].get("devices") or []
    }


@pytest.fixture(scope="module")
def fleet():
    runtime = os.environ.get("CARVE_E2E_RUNTIME", "containerd")
    if runtime != "containerd":
        pytest.skip(f"the plugin's DaemonSet needs real containers; this session runs {runtime} on purpose")
    if os.environ.get("CARVE_E2E_DAEMONSET", "1") == "0":
        pytest.skip("CARVE_E2E_DAEMONSET=0")
    version = resolve(os.environ.get("CARVE_E2E_K8S", "1.36"), os.environ.get("CARVE_E2E_GATES", "on"))
    if not version.gates_on:
        pytest.skip("MIG devices need DRAPartitionableDevices (gates off here)")
    root = Path(tempfile.mkdtemp(prefix=f"carve-e2e-fleet-{version.minor}-"))
    specs = (NodeSpec(T4, "fake:1xT4", STRATEGY), NodeSpec(A100, "fake:1xA100-80GB", STRATEGY))
    c = Cluster(version, root, specs=specs, runtime="containerd", plugin_mode="daemonset")
    yield from cluster_session(
        c, root, f"{version.label} fleet cluster (T4 + A100, plugin.strategy={STRATEGY})"
    )


def test_one_strategy_value_serves_a_mixed_fleet(fleet):
    c = fleet
    for node in (T4, A100):
        pod = kube.wait(
            f"the plugin pod on {node} Ready", lambda n=node: (p := c.plugin_pod(n)) and _ready(p) and p
        )
        # The T4 cannot run MIG: the plugin did not exit over it (before issue 18 it crash-looped).
        assert pod.status.container_statuses[0].restart_count == 0, pod.status.container_statuses
    assert {"mig", "gpu"} <= _types(c, A100), _types(c, A100)  # the A100 in MIG: instances + the whole GPU
    assert _types(c, T4) == {"vgpu"}, _types(c, T4)  # the T4 on the fallback (soft)

    def fallback_events():
        found = [
            e
            for e in client.CoreV1Api(c.api()).list_event_for_all_namespaces().items
            if e.reason == "StrategyFallback"
        ]
        return found or None

    events = kube.wait("the StrategyFallback Event", fallback_events)
    assert [(e.involved_object.kind, e.involved_object.name) for e in events] == [("Node", T4)], events
    assert events[0].type == "Warning"
    message = events[0].message
    assert "GPU 0 (Tesla T4" in message and "rule 'mig'" in message and "runs soft" in message, message


MIG_7G = kube.mig_profile("7g.80gb")
MIG_3G = kube.mig_profile("3g.40gb")


def _partitioning(api, node: str) -> dict | None:
    try:
        return client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, VERSION, "nodepartitionings", node
        )
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


@pytest.fixture(scope="module")
def pinned_controller(cluster, gates_on):
    if not gates_on:
        pytest.skip("MIG devices need DRAPartitionableDevices (gates off here): nothing to switch to")
    sc = StrategyController(cluster, spec=PINNED_NODE, extra_args=["--plugin-strategy", PINNED_NODE.strategy])
    sc.start()
    yield sc
    sc.stop()


def test_a_pinned_gpu_stays_while_the_managed_one_changes(cluster, api, namespace, pinned_controller):
    sc = pinned_controller
    node = sc.name
    assert _types(cluster, node) == {"vgpu"}  # both GPUs soft
    # The cluster's only MIG GPU (e2e-n1's GPU 0) is taken whole: a 3g.40gb instance fits nowhere as is.
    kube.create(api, namespace, kube.template("hold", MIG_7G))
    kube.create(api, namespace, kube.pod("hold", claim_template="hold"))
    assert kube.wait_outcome(api, namespace, "hold")[0] == "scheduled"
    kube.create(api, namespace, kube.template("llm", MIG_3G))
    kube.create(api, namespace, kube.pod("llm", claim_template="llm"))

    def switched():
        np = _partitioning(api, node)
        spec = {g["index"]: g["strategy"] for g in (np or {}).get("spec", {}).get("gpus") or []}
        return np if spec.get(1) == "mig" else None

    np = kube.wait(f"the controller's NodePartitioning of {node}", switched, timeout_s=120)
    # GPU 0 is pinned by the plugin's index rule: the controller wrote no entry for it.
    assert [g["index"] for g in np["spec"]["gpus"]] == [1], np["spec"]

    def applied():
        status = (_partitioning(api, node) or {}).get("status") or {}
        gpus = {g["index"]: g for g in status.get("gpus") or []}
        return gpus if gpus.get(1, {}).get("strategy") == "mig" else None

    gpus = kube.wait(f"{node}'s plugin applying GPU 1's change", applied, timeout_s=120)
    assert (gpus[0]["strategy"], gpus[0]["source"]) == ("soft", "pinned"), gpus
    assert gpus[1]["source"] == "controller", gpus
    assert kube.wait_outcome(api, namespace, "llm", timeout_s=120) == ("scheduled", node)
    result = kube.results(kube.claim_of(api, namespace, "llm"))[0]
    assert result["device"].startswith("gpu-1-mig-"), result
    devices = [d["name"] for s in cluster.slices(node) for d in s["spec"].get("devices") or []]
    assert not [d for d in devices if d.startswith("gpu-0-mig")], devices  # GPU 0 stayed soft
    kube.delete_pod(api, namespace, "llm")
    kube.delete_pod(api, namespace, "hold")
