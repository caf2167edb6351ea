"""End to end on a real cluster: slices are published, and pods get their claims prepared by the plugin.

Run: KUBECONFIG=... make e2e-kind (a kind cluster with fake GPUs works: e2e/README.md).
"""

from __future__ import annotations

import os

from driver import names
from e2e.kube import wait

IMAGE = os.environ.get("CARVE_E2E_IMAGE", "busybox:1.36")
TIMEOUT_S = float(os.environ.get("CARVE_E2E_TIMEOUT", "180"))


def _pod_with_claim(name: str, exactly: dict) -> tuple[dict, dict]:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "command": ["sh", "-c", "env; sleep 3600"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    return template, pod


def _run(api, namespace: str, name: str, exactly: dict) -> dict[str, str]:
    """Start a pod with one claim, wait until it runs, return its environment."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    template, pod = _pod_with_claim(name, exactly)
    custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", template
    )
    core.create_namespaced_pod(namespace, pod)
    wait(
        f"pod {namespace}/{name} Running",
        lambda: core.read_namespaced_pod(name, namespace).status.phase == "Running",
        TIMEOUT_S,
    )
    logs = wait(
        f"pod {namespace}/{name} logs", lambda: core.read_namespaced_pod_log(name, namespace), TIMEOUT_S
    )
    return dict(line.split("=", 1) for line in logs.splitlines() if "=" in line)


def test_every_plugin_node_publishes_devices(api, carve_nodes):
    from kubernetes import client

    objs = client.CustomObjectsApi(api).list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
    for node in carve_nodes:
        mine = [
            s
            for s in objs["items"]
            if s["spec"]["driver"] == names.DRIVER_NAME and s["spec"].get("nodeName") == node
        ]
        assert sum(len(s["spec"].get("devices") or []) for s in mine) > 0, node
        assert len({s["spec"]["pool"]["generation"] for s in mine}) == 1, f"{node}: mixed pool generations"


def test_whole_gpu_pod_runs_with_the_cdi_env(api, carve_nodes, namespace):
    env = _run(api, namespace, "whole", {"deviceClassName": names.CLASS_GPU})
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "void"


def test_soft_slice_pod_gets_its_limits(api, carve_nodes, namespace):
    from kubernetes import client

    classes = {
        c["metadata"]["name"]
        for c in client.CustomObjectsApi(api).list_cluster_custom_object(
            "resource.k8s.io", "v1", "deviceclasses"
        )["items"]
    }
    assert names.CLASS_VGPU in classes, "carve's DeviceClasses are not installed"
    env = _run(
        api,
        namespace,
        "soft",
        {"deviceClassName": names.CLASS_VGPU, "capacity": {"requests": {"memory": "1Gi", "cores": "20"}}},
    )
    assert env.get("CARVE_MEMORY_LIMIT_0") == str(1024**3)
    assert env.get("CARVE_CORES_LIMIT_0") == "20"
    assert env.get("CARVE_REGION", "").startswith("/var/run/carve/")
