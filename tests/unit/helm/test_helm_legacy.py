"""The chart's legacy shim (legacy.enabled): a node runs either the DRA plugin or the legacy device plugin,
the second scheduler's configuration, env twins of real flags (RBAC against the calls made:
tests/integration/legacy/test_legacy_rbac.py)."""

from __future__ import annotations

import argparse
import re

import pytest
import yaml
from helm_render import CHART, NAMESPACE, RenderError, env_of, render, run_helm

from driver import names
from driver.cli import env_twin
from driver.legacy import command as plugin_command
from driver.legacy.extender import command as extender_command

ON = ("--set", "legacy.enabled=true")
WEBHOOK = ("--set", "legacy.enabled=true,legacy.webhook.enabled=true")
LEGACY_ONLY = (
    "--set",
    "legacy.enabled=true,plugin.enabled=false,deviceClasses.enabled=false,validatingAdmissionPolicy.enabled=false",
)


def by_name(objects, kind: str, suffix: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def term_matches(term: dict, labels: dict[str, str]) -> bool:
    for e in term.get("matchExpressions") or []:
        value = labels.get(e["key"])
        if e["operator"] == "In" and value not in e["values"]:
            return False
        if e["operator"] == "NotIn" and value in e["values"]:
            return False
    return True


def lands_on(pod_spec: dict, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    terms = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    return not terms or any(term_matches(t, labels) for t in terms)


def test_off_by_default():
    assert not [o for o in render() if "legacy" in o["metadata"]["name"]]


@pytest.mark.parametrize(
    "labels",
    [
        {"nvidia.com/gpu.present": "true"},
        {"nvidia.com/gpu.present": "true", names.LEGACY_NODE_LABEL: "true"},
        {"feature.node.kubernetes.io/pci-10de.present": "true", names.LEGACY_NODE_LABEL: "true"},
        {"feature.node.kubernetes.io/pci-10de.present": "true", names.LEGACY_NODE_LABEL: "false"},
    ],
)
def test_a_gpu_node_runs_exactly_one_of_the_two_plugins(labels):
    objects = render(*ON)
    dra = by_name(objects, "DaemonSet", "-kubelet-plugin")["spec"]["template"]["spec"]
    legacy = by_name(objects, "DaemonSet", "-legacy-device-plugin")["spec"]["template"]["spec"]
    assert lands_on(dra, labels) != lands_on(legacy, labels)
    assert lands_on(legacy, labels) == (labels.get(names.LEGACY_NODE_LABEL) == "true")


def test_scheduler_configuration_uses_the_extender_and_ignores_unregistered_resources():
    objects = render(*ON)
    config = yaml.safe_load(by_name(objects, "ConfigMap", "-legacy-scheduler")["data"]["config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert [p["schedulerName"] for p in config["profiles"]] == [names.LEGACY_SCHEDULER_NAME]
    (ext,) = config["extenders"]
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == ("filter", "prioritize", "bind")
    assert ext["nodeCacheCapable"] is True
    ignored = {m["name"]: m["ignoredByScheduler"] for m in ext["managedResources"]}
    assert ignored == {
        names.LEGACY_GPU: False,
        names.LEGACY_GPUMEM: True,
        names.LEGACY_GPUCORES: True,
        names.LEGACY_GPUMEM_PERCENTAGE: True,
        names.LEGACY_PRIORITY: True,
    }
    pod = by_name(objects, "Deployment", "-legacy-scheduler")["spec"]["template"]["spec"]
    extender = next(c for c in pod["containers"] if c["name"] == "extender")
    assert ext["urlPrefix"] == f"http://{env_of(extender)['CARVE_ADDR']}"
    scheduler = next(c for c in pod["containers"] if c["name"] == "kube-scheduler")
    assert scheduler["image"].startswith("registry.k8s.io/kube-scheduler:")


@pytest.mark.parametrize(
    ("module", "kind", "suffix", "container"),
    [
        (plugin_command, "DaemonSet", "-legacy-device-plugin", "device-plugin"),
        (extender_command, "Deployment", "-legacy-scheduler", "extender"),
    ],
)
def test_every_carve_variable_is_the_twin_of_a_real_flag(module, kind, suffix, container):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    twins = {env_twin(o) for a in parser._actions for o in a.option_strings if o.startswith("--")}
    pod = by_name(render(*WEBHOOK), kind, suffix)["spec"]["template"]["spec"]
    env = env_of(next(c for c in pod["containers"] if c["name"] == container))
    carve_vars = {k for k in env if k.startswith("CARVE_")}
    assert carve_vars and carve_vars <= twins, carve_vars - twins


def test_legacy_only_renders_on_a_cluster_without_dra():
    kinds = {o["kind"] for o in render(*LEGACY_ONLY, kube_version="1.30.0")}
    assert "DeviceClass" not in kinds and "DaemonSet" in kinds and "Deployment" in kinds


def test_dra_parts_below_1_34_are_refused_with_the_way_out():
    with pytest.raises(RenderError, match=re.escape("legacy.enabled=true,plugin.enabled=false")):
        render(*ON, kube_version="1.30.0")


def test_webhook_off_by_default_and_served_by_the_extender_when_on():
    assert not [o for o in render(*ON) if o["kind"] == "MutatingWebhookConfiguration"]
    objects = render(*WEBHOOK)
    mwc = by_name(objects, "MutatingWebhookConfiguration", "-legacy-webhook")
    (hook,) = mwc["webhooks"]
    assert hook["rules"][0]["operations"] == ["CREATE"] and hook["rules"][0]["resources"] == ["pods"]
    assert hook["failurePolicy"] == "Ignore" and hook["clientConfig"]["caBundle"]
    svc = by_name(objects, "Service", "-legacy-webhook")
    assert hook["clientConfig"]["service"] == {
        "name": svc["metadata"]["name"],
        "namespace": NAMESPACE,
        "path": "/mutate",
    }
    pod = by_name(objects, "Deployment", "-legacy-scheduler")["spec"]["template"]["spec"]
    extender = next(c for c in pod["containers"] if c["name"] == "extender")
    assert env_of(extender)["CARVE_WEBHOOK_ADDR"] == f":{svc['spec']['ports'][0]['targetPort']}"
    secret = by_name(objects, "Secret", "-legacy-webhook")
    assert secret["data"]["ca.crt"] == hook["clientConfig"]["caBundle"]


@pytest.mark.parametrize(("args", "kube_version"), [(WEBHOOK, "1.34.0"), (LEGACY_ONLY, "1.30.0")])
def test_legacy_objects_are_valid_kubernetes_objects(args, kube_version):
    import kubernetes_validate

    objects = render(
        *args, "--set", "legacy.devicePlugin.nodeConfig.gpu-3.splitCount=4", kube_version=kube_version
    )
    legacy = [o for o in objects if "legacy" in o["metadata"]["name"]]
    assert {o["kind"] for o in legacy} >= {
        "DaemonSet",
        "Deployment",
        "ConfigMap",
        "ClusterRole",
        "Role",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in legacy:
        try:
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {e.message}")
    done = run_helm("lint", "--strict", str(CHART), *args)
    assert done.returncode == 0, done.stdout + done.stderr


def _scheduler_image(*args: str, kube_version: str) -> str:
    objects = render(*LEGACY_ONLY, *args, kube_version=kube_version)
    pod = by_name(objects, "Deployment", "-legacy-scheduler")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "kube-scheduler")["image"]


@pytest.mark.parametrize(
    ("cluster", "tag"),
    [
        ("1.29.3", "v1.29.3"),
        ("1.33.0", "v1.33.0"),
        ("v1.31.2-gke.1200", "v1.31.2"),
        ("v1.30.4+k3s1", "v1.30.4"),
    ],
)
def test_second_scheduler_follows_the_clusters_version(cluster, tag):
    # Issue 29: the image was pinned to one release (v1.33.4), whatever the control plane ran.
    assert _scheduler_image(kube_version=cluster) == f"registry.k8s.io/kube-scheduler:{tag}"


def test_second_scheduler_image_can_be_pinned():
    pinned = "registry.example.com/kube-scheduler:v1.30.14"
    assert _scheduler_image("--set", f"legacy.scheduler.image={pinned}", kube_version="1.33.0") == pinned
