"""Small helpers the e2e tests share: pods with claims, waiting for their outcome, reading allocations."""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from kubernetes import client

from driver import names

GROUP, VERSION = "resource.k8s.io", "v1"
TIMEOUT_S = 90.0


def wait(what: str, check, timeout_s: float = TIMEOUT_S, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


def soft_or_slot(gates_on: bool) -> list[dict]:
    """A claim's requests for a soft slice (2Gi, 20 % of the cores); with the alpha gates off, where soft
    devices are not published, a slot of the plugin's fallback."""
    if gates_on:
        capacity = {"requests": {"memory": "2Gi", "cores": "20"}}
        return [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_VGPU, "capacity": capacity}}]
    return [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_SLOT}}]


def mig_profile(profile: str) -> list[dict]:
    """A claim's request for one MIG device of `profile` (e.g. "1g.10gb")."""
    selector = {"cel": {"expression": f'device.attributes["{names.DRIVER_NAME}"].profile == "{profile}"'}}
    return [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_MIG, "selectors": [selector]}}]


def template(name: str, requests: list[dict], constraints: list[dict] | None = None) -> dict:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def pod(
    name: str,
    claim_template: str | None = None,
    claim: str | None = None,
    node: str | None = None,
    containers: int = 1,
) -> dict:
    ref = {"name": "gpu"}
    if claim_template:
        ref["resourceClaimTemplateName"] = claim_template
    else:
        ref["resourceClaimName"] = claim
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "resourceClaims": [ref],
        "containers": [
            {
                "name": f"c{i}",
                "image": "e2e/busybox",
                # Imported into each node's containerd (e2e/cluster/images.py); there is no registry.
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "resources": {"claims": [{"name": "gpu"}]},
            }
            for i in range(containers)
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def legacy_pod(name: str, gpu: int, mem: int | None = None, cores: int | None = None, **spec: Any) -> dict:
    """A pod asking the legacy shim for `gpu` GPUs (HAMi's resources: `gpumem` MiB and `gpucores` percent
    per GPU where given), scheduled by carve-scheduler; `spec` adds pod spec fields (e.g. nodeName)."""
    limits = {names.LEGACY_GPU: str(gpu)}
    if mem is not None:
        limits[names.LEGACY_GPUMEM] = str(mem)
    if cores is not None:
        limits[names.LEGACY_GPUCORES] = str(cores)
    container = {
        "name": "main",
        "image": "e2e/busybox",
        "imagePullPolicy": "IfNotPresent",  # no registry (e2e/cluster/images.py)
        "command": ["sleep", "3600"],
        "resources": {"limits": limits},
    }
    body = {
        "schedulerName": names.LEGACY_SCHEDULER_NAME,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [container],
        **spec,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def create(api, namespace: str, obj: dict) -> dict:
    kind = obj["kind"]
    if kind == "Pod":
        return client.CoreV1Api(api).create_namespaced_pod(namespace, obj).to_dict()
    plural = {"ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims"}[kind]
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, obj
    )


def outcome(api, namespace: str, name: str) -> tuple[str, str] | None:
    """("scheduled", node) or ("unschedulable", message) once the scheduler decided, else None."""
    p = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    if p.spec.node_name:
        return ("scheduled", p.spec.node_name)
    for c in p.status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return ("unschedulable", c.message or "")
    return None


def wait_outcome(api, namespace: str, name: str, timeout_s: float = TIMEOUT_S) -> tuple[str, str]:
    return wait(
        f"the scheduler's decision on pod {namespace}/{name}",
        lambda: outcome(api, namespace, name),
        timeout_s,
    )


def wait_running(api, namespace: str, name: str, timeout_s: float = TIMEOUT_S) -> client.V1Pod:
    core = client.CoreV1Api(api)

    def running():
        p = core.read_namespaced_pod(name, namespace)
        return p if p.status.phase == "Running" else None

    return wait(f"pod {namespace}/{name} Running", running, timeout_s)


def claim_of(api, namespace: str, pod_name: str) -> dict:
    """The pod's ResourceClaim (made from its template by the resourceclaim controller)."""
    p = client.CoreV1Api(api).read_namespaced_pod(pod_name, namespace)
    statuses = p.status.resource_claim_statuses or []
    assert statuses and statuses[0].resource_claim_name, (
        f"{namespace}/{pod_name}: no claim made from its template"
    )
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", statuses[0].resource_claim_name
    )


def results(claim: dict) -> list[dict]:
    return ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []


def delete_pod(api, namespace: str, name: str, timeout_s: float = TIMEOUT_S, force: bool = False) -> None:
    """Delete and wait until it is gone; a graceful delete waits for its kubelet (which unprepares)."""
    core = client.CoreV1Api(api)
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0 if force else None)

    def gone():
        try:
            core.read_namespaced_pod(name, namespace)
        except client.ApiException as e:
            return e.status == 404
        return False

    wait(f"pod {namespace}/{name} gone", gone, timeout_s)


def delete_namespace(api, name: str, timeout_s: float = 300.0, claims: bool = True) -> None:
    """Delete the namespace's pods, then (`claims`: a cluster with DRA) its ResourceClaims, then it."""
    core = client.CoreV1Api(api)
    for p in core.list_namespaced_pod(name).items:
        core.delete_namespaced_pod(p.metadata.name, name, grace_period_seconds=0)
    wait(f"pods of namespace {name} gone", lambda: not core.list_namespaced_pod(name).items, timeout_s)
    if claims:
        # Claims made from templates go with their pods, standalone ones are deleted here; either way the
        # allocation must be released before the next test.
        custom = client.CustomObjectsApi(api)
        custom.delete_collection_namespaced_custom_object(GROUP, VERSION, name, "resourceclaims")
        wait(
            f"claims of namespace {name} gone",
            lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, name, "resourceclaims")["items"],
            timeout_s,
        )
    core.delete_namespace(name)


# A real driver shows a container only the GPUs whose device nodes it has; the fake libcuda shows all of
# CARVE_FAKE_GPUS, so the probe narrows it to the container's /dev/nvidia<minor> (minor = index).
CUDA_VISIBLE_FROM_DEV = (
    "CUDA_VISIBLE_DEVICES=$(ls /dev | sed -n 's/^nvidia\\([0-9][0-9]*\\)$/\\1/p' | paste -sd, -)"
)


def exec_sh(cluster, namespace: str, pod: str, script: str) -> str:
    """`kubectl exec <pod> -- sh -c <script>` in a real container; its stdout, or the test fails."""
    p = cluster.kubectl("exec", "-n", namespace, pod, "--", "sh", "-c", script, check=False)
    assert p.returncode == 0, f"kubectl exec {pod} -- sh -c {shlex.quote(script)}: {p.stderr}{p.stdout}"
    return p.stdout


def container_env(cluster, namespace: str, pod: str) -> dict[str, str]:
    out = exec_sh(cluster, namespace, pod, "env")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def cuda_probe(cluster, namespace: str, pod: str, nbytes: int) -> dict:
    """The e2e/glibc image's `cuda-probe <bytes>` (dlopen libcuda.so.1, init, context, cuMemAlloc): its
    JSON verdict (library, limiter mapped, init/ctx/alloc results)."""
    out = exec_sh(cluster, namespace, pod, f"{CUDA_VISIBLE_FROM_DEV} cuda-probe {nbytes}")
    return json.loads(out.strip().splitlines()[-1])
