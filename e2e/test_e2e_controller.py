"""End to end: the strategy controller switches an idle soft GPU to MIG for a pod that asks for a MIG
instance, the plugin applies it, and the real scheduler places the pod (issue 8).

Needs the chart installed with the controller (the default) on a node with a MIG-capable GPU (kind with
fake GPUs: e2e/README.md; `plugin.gpus=fake:2xA100-80GB,1xT4`). The test first makes every GPU of that
node soft (as the controller would, through its NodePartitioning) and waits for the plugin to report it
applied, then creates the pod.
"""

from __future__ import annotations

from test_e2e_plugin import TIMEOUT_S, _pod_with_claim, _wait

from driver import names

PLURAL = ("carve.dev", "v1alpha1", "nodepartitionings")


def _mig_node(api, carve_nodes) -> tuple[str, list[int], int]:
    """A node with a MIG-capable GPU: its name, every GPU index, the index of one MIG-capable GPU."""
    from kubernetes import client

    objs = client.CustomObjectsApi(api).list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
    for node in carve_nodes:
        gpus: dict[int, bool] = {}
        for s in objs["items"]:
            if s["spec"]["driver"] != names.DRIVER_NAME or s["spec"].get("nodeName") != node:
                continue
            for d in s["spec"].get("devices") or []:
                a = {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
                gpus[int(a["index"])] = gpus.get(int(a["index"]), False) or bool(a.get("migCapable"))
        capable = [i for i, c in sorted(gpus.items()) if c]
        if capable:
            return node, sorted(gpus), capable[0]
    raise AssertionError(f"no carve node with a MIG-capable GPU among {carve_nodes}")


def _partitioning(custom, node: str) -> dict | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return custom.get_cluster_custom_object(*PLURAL, node)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def test_a_mig_claim_turns_an_idle_soft_gpu_into_mig(api, carve_nodes, namespace):
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    node, indices, _ = _mig_node(api, carve_nodes)
    spec = {"gpus": [{"index": i, "strategy": "soft"} for i in indices], "paused": False}
    current = _partitioning(custom, node)
    if current is None:
        custom.create_cluster_custom_object(
            *PLURAL,
            {
                "apiVersion": "carve.dev/v1alpha1",
                "kind": "NodePartitioning",
                "metadata": {"name": node},
                "spec": spec,
            },
        )
    else:
        custom.replace_cluster_custom_object(*PLURAL, node, {**current, "spec": spec})

    def all_soft() -> bool:
        status = (_partitioning(custom, node) or {}).get("status") or {}
        gpus = status.get("gpus") or []
        return bool(gpus) and all(g.get("strategy") == "soft" and not g.get("pending") for g in gpus)

    _wait(f"node {node}: every GPU soft and applied", all_soft)

    template, pod = _pod_with_claim(
        "mig",
        {
            "deviceClassName": names.CLASS_MIG,
            "selectors": [
                {"cel": {"expression": f'device.attributes["{names.DRIVER_NAME}"].profile == "3g.40gb"'}}
            ],
        },
    )
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", template
    )
    core.create_namespaced_pod(namespace, pod)

    def switched() -> list[dict]:
        obj = _partitioning(custom, node) or {}
        return [g for g in (obj.get("status") or {}).get("gpus") or [] if g.get("strategy") == "mig"]

    _wait(
        f"node {node}: a GPU switched to mig by the controller and applied by the plugin",
        switched,
        timeout_s=TIMEOUT_S * 2,
    )
    _wait(
        f"pod {namespace}/mig Running",
        lambda: core.read_namespaced_pod("mig", namespace).status.phase == "Running",
        timeout_s=TIMEOUT_S * 2,
    )
    events = core.list_namespaced_event(namespace).items
    assert any(e.reason == "GPUStrategyChange" for e in events), [e.reason for e in events]
