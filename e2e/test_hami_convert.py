"""HAMi pod specs on DRA, on the real control plane (issue 28, docs/migrate-from-hami.md):

- `carve convert` output (templates + rewritten Pod and Deployment: gpumem MiB, gpucores, a percentage
  turned into one alternative per GPU model of the cluster's ResourceSlices, a count of 2 on distinct GPUs,
  two containers) is accepted by the API server, the resourceclaim controller makes the claims, and (gates
  on, soft slices published) the scheduler places the pods and the containers get the limits HAMi meant;
- the controller's opt-in mutating webhook does the same to pods as they are created (a bare Pod and a
  Deployment's pods), sharing one template per distinct ask, and refuses a bad spec naming the field;
- where DRAExtendedResource is on, the chart's gpu.carve.dev class with `extendedResourceName:
  nvidia.com/gpu` gives a pod that keeps `nvidia.com/gpu: 1` a whole carve GPU, manifest unchanged.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from driver import names
from driver.allocator import quantity
from e2e import kube
from e2e.cluster.chart import render_chart
from e2e.controller_webhooks import HAMI_NAMESPACE_LABEL

G, V = "resource.k8s.io", "v1"
MI = 1 << 20
CARVE = str(Path(sys.executable).parent / "carve")


def container(name: str, **limits) -> dict:
    return {
        "name": name,
        "image": "e2e/busybox",
        "imagePullPolicy": "IfNotPresent",  # no registry (e2e/cluster/images.py)
        "command": ["sleep", "3600"],
        "resources": {"limits": {k: str(v) for k, v in limits.items()}},
    }


def hami_pod(name: str, *containers: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": list(containers),
        },
    }


def hami_deployment(name: str, replicas: int, *containers: dict) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": False,
                    "containers": list(containers),
                },
            },
        },
    }


@pytest.fixture
def deployments_go(api, namespace):
    """Deployments of the test are deleted before its namespace (their pods would come back)."""
    yield
    apps = client.AppsV1Api(api)
    apps.delete_collection_namespaced_deployment(namespace)
    apps.delete_collection_namespaced_replica_set(namespace)
    kube.wait(
        f"replica sets of {namespace} gone", lambda: not apps.list_namespaced_replica_set(namespace).items
    )
    # and their pods (all labelled app=<deployment>), so the namespace's teardown deletes none of them twice
    core = client.CoreV1Api(api)
    kube.wait(
        f"deployment pods of {namespace} gone",
        lambda: not core.list_namespaced_pod(namespace, label_selector="app").items,
        timeout_s=120,
    )


def env_of(cluster, ns: str, pod: str, container_name: str) -> dict[str, str]:
    done = cluster.kubectl("exec", "-n", ns, pod, "-c", container_name, "--", "env")
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def claims_by_pod_claim(api, ns: str, pod: str) -> dict[str, dict]:
    p = client.CoreV1Api(api).read_namespaced_pod(pod, ns)
    custom = client.CustomObjectsApi(api)
    return {
        s.name: custom.get_namespaced_custom_object(G, V, ns, "resourceclaims", s.resource_claim_name)
        for s in p.status.resource_claim_statuses or []
        if s.resource_claim_name
    }


def values(requests: dict) -> dict[str, int]:
    """Capacity requests by value: the API server writes quantities back in canonical form (1024Mi: 1Gi)."""
    return {k: int(quantity.of(v).value) for k, v in requests.items()}


def deployment_pods(api, ns: str, app: str, n: int) -> list[client.V1Pod]:
    core = client.CoreV1Api(api)
    return kube.wait(
        f"{n} pods of deployment {app}",
        lambda: (lambda ps: ps if len(ps) == n else None)(
            core.list_namespaced_pod(ns, label_selector=f"app={app}").items
        ),
    )


# --- carve convert ------------------------------------------------------------------------------------------


def test_carve_convert_output_runs_as_hami_meant(api, cluster, namespace, gates_on, tmp_path, deployments_go):
    slices = tmp_path / "slices.yaml"
    slices.write_text(cluster.kubectl("get", "resourceslices", "-o", "yaml").stdout)
    manifests = tmp_path / "hami.yaml"
    manifests.write_text(
        yaml.safe_dump_all(
            [
                hami_pod(
                    "infer",
                    container(
                        "server",
                        **{names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: 1024, names.LEGACY_GPUCORES: 20},
                    ),
                    container("side", **{names.LEGACY_GPU: 1, names.LEGACY_GPUMEM_PERCENTAGE: 5}),
                ),
                hami_deployment(
                    "pair", 1, container("main", **{names.LEGACY_GPU: 2, names.LEGACY_GPUMEM: 512})
                ),
            ]
        )
    )
    done = subprocess.run(
        [CARVE, "convert", str(manifests), "--slices", str(slices)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if not gates_on:
        # No soft devices are published without consumable capacity: no GPU model to take 5% of.
        assert done.returncode == 2, done.stdout
        assert (
            "document 1: Pod infer: spec.containers[1].resources.limits.nvidia.com/gpumem-percentage: "
            "asks 5% of each GPU's memory; DRA requests absolute amounts and no GPU model is known"
        ) in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    assert [d["kind"] for d in docs] == ["ResourceClaimTemplate"] * 2 + [
        "Pod",
        "ResourceClaimTemplate",
        "Deployment",
    ]
    assert names.LEGACY_GPU not in done.stdout
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=done.stdout)

    claims = kube.wait(
        "the infer pod's claims",
        lambda: (lambda c: c if len(c) == 2 else None)(claims_by_pod_claim(api, namespace, "infer")),
    )
    server = claims["server-gpu"]["spec"]["devices"]["requests"][0]["exactly"]
    assert values(server["capacity"]["requests"]) == {
        "memory": 1024 * MI,
        "cores": 20,
    }  # 1024Mi reads back 1Gi
    side = claims["side-gpu"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    models = {s["name"] for s in side}
    assert {"nvidia-a100-sxm4-80gb", "tesla-t4"} <= models, models
    (pair,) = deployment_pods(api, namespace, "pair", 1)
    kube.wait_running(api, namespace, "infer")
    env = env_of(cluster, namespace, "infer", "server")
    assert env["CARVE_MEMORY_LIMIT_0"] == str(1024 * MI) and env["CARVE_CORES_LIMIT_0"] == "20"
    (r,) = kube.results(claims_by_pod_claim(api, namespace, "infer")["side-gpu"])
    product = r["request"].split("/", 1)[1]
    sub = next(s for s in side if s["name"] == product)
    assert env_of(cluster, namespace, "infer", "side")["CARVE_MEMORY_LIMIT_0"] == str(
        values(sub["capacity"]["requests"])["memory"]
    )
    kube.wait_running(api, namespace, pair.metadata.name)
    (claim,) = claims_by_pod_claim(api, namespace, pair.metadata.name).values()
    results = kube.results(claim)
    assert len(results) == 2 and len({r["device"] for r in results}) == 2  # two distinct GPUs, as HAMi gives


# --- the mutating webhook -----------------------------------------------------------------------------------


@pytest.fixture
def hami_namespace(api, namespace, webhooks):
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": {HAMI_NAMESPACE_LABEL: "on"}}})
    bad = hami_pod("probe", container("main", **{names.LEGACY_GPU: 1, names.LEGACY_GPUCORES: 500}))

    def converting():  # the API server calls the webhook once its namespace informer has the label
        try:
            kube.create(api, namespace, bad)
        except client.ApiException as e:
            return e.status == 403 and e
        kube.delete_pod(api, namespace, "probe", force=True)
        return None

    e = kube.wait(f"the HAMi webhook on namespace {namespace}", converting, timeout_s=30, every_s=1)
    # The probe's refusal is the webhook's own, naming the field.
    assert (
        f"carve HAMi conversion: pod {namespace}/probe: spec.containers[0]: container main: "
        "nvidia.com/gpucores: 500 is over 100"
    ) in json.loads(e.body)["message"], e.body
    return namespace


def test_the_webhook_converts_hami_pods_as_they_are_created(
    api, cluster, hami_namespace, gates_on, deployments_go
):
    ns = hami_namespace
    asks = {
        names.LEGACY_GPU: 1,
        names.LEGACY_GPUMEM: 2048,
        names.LEGACY_GPUCORES: 30,
        names.LEGACY_PRIORITY: 1,
    }
    kube.create(api, ns, hami_pod("web", container("main", **asks)))
    pod = client.CoreV1Api(api).read_namespaced_pod("web", ns)
    c = pod.spec.containers[0]
    assert not any(k.startswith("nvidia.com/") for k in (c.resources.limits or {}))
    assert [x.name for x in c.resources.claims] == ["main-gpu"]
    (rc,) = pod.spec.resource_claims
    template = client.CustomObjectsApi(api).get_namespaced_custom_object(
        G, V, ns, "resourceclaimtemplates", rc.resource_claim_template_name
    )
    assert template["metadata"]["labels"] == {names.CONVERTED_LABEL: "hami"}
    devices = template["spec"]["spec"]["devices"]
    exactly = devices["requests"][0]["exactly"]
    if gates_on:
        assert values(exactly["capacity"]["requests"]) == {"memory": 2048 * MI, "cores": 30}
    else:  # DRAConsumableCapacity off: the API server drops the template's capacity (no soft devices either)
        assert "capacity" not in exactly, exactly
    assert devices["config"][0]["opaque"]["parameters"]["priority"] == "low"
    assert json.loads(pod.metadata.annotations[names.CONVERTED_ANNOTATION]) == {
        "main": {k: str(v) for k, v in asks.items()}
    }

    # A Deployment's pods (made by the ReplicaSet controller) are converted too, sharing one template.
    client.AppsV1Api(api).create_namespaced_deployment(
        ns, hami_deployment("fleet", 2, container("main", **{names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: 512}))
    )
    pods = deployment_pods(api, ns, "fleet", 2)
    templates = {p.spec.resource_claims[0].resource_claim_template_name for p in pods}
    assert len(templates) == 1, templates
    if gates_on:
        kube.wait_running(api, ns, "web")
        env = env_of(cluster, ns, "web", "main")
        assert env["CARVE_MEMORY_LIMIT_0"] == str(2048 * MI) and env["CARVE_PRIORITY"] == "low"
        for p in pods:
            kube.wait_running(api, ns, p.metadata.name)


# --- extendedResourceName -----------------------------------------------------------------------------------


def gpu_class(cluster, *sets: str) -> str:
    """The chart's gpu.carve.dev DeviceClass, rendered with `sets`."""
    docs = yaml.safe_load_all(render_chart(cluster.version, *sets))
    (dc,) = [d for d in docs if d and d["kind"] == "DeviceClass" and d["metadata"]["name"] == names.CLASS_GPU]
    return yaml.safe_dump(dc)


def test_pods_that_keep_nvidia_gpu_get_a_whole_carve_gpu(api, cluster, namespace, gates_on):
    v = cluster.version
    if v.minor_int < 36 and not gates_on:
        pytest.skip(
            f"{v.label}: DRAExtendedResource is alpha and off (the API server drops extendedResourceName)"
        )
    cluster.kubectl(
        "apply", "-f", "-", stdin=gpu_class(cluster, "deviceClasses.extendedResourceName=nvidia.com/gpu")
    )
    try:
        stored = client.CustomObjectsApi(api).get_cluster_custom_object(
            G, V, "deviceclasses", names.CLASS_GPU
        )
        assert stored["spec"].get("extendedResourceName") == "nvidia.com/gpu", stored["spec"]
        pod = hami_pod("plain", container("main", **{names.LEGACY_GPU: 1}))
        kube.create(api, namespace, pod)
        outcome = kube.wait_outcome(api, namespace, "plain", timeout_s=120)
        assert outcome[0] == "scheduled", outcome
        p = client.CoreV1Api(api).read_namespaced_pod("plain", namespace)
        assert p.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}  # the manifest as written
        status = p.status.extended_resource_claim_status
        assert status and status.resource_claim_name, p.status
        made = client.CustomObjectsApi(api).get_namespaced_custom_object(
            G, V, namespace, "resourceclaims", status.resource_claim_name
        )
        (r,) = kube.results(made)
        assert r["driver"] == names.DRIVER_NAME
        node_slices = cluster.slices(r["pool"])
        device = next(d for s in node_slices for d in s["spec"]["devices"] if d["name"] == r["device"])
        assert device["attributes"]["type"]["string"] == names.TYPE_GPU, device
        running = kube.wait_running(api, namespace, "plain")
        assert running.status.phase == "Running"
    finally:
        with contextlib.suppress(client.ApiException):
            kube.delete_pod(api, namespace, "plain", force=True)
        cluster.kubectl("apply", "-f", "-", stdin=gpu_class(cluster))
