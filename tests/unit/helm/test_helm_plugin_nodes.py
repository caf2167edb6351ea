"""Where the plugin DaemonSet lands (issue 29): GPU nodes without Node Feature Discovery can be labelled
gpu.carve.dev/present=true, and an empty affinity that would put the plugin on every CPU node (where its
init container waits forever for a driver) is refused with the way out."""

from __future__ import annotations

import pytest
from helm_render import RenderError, one, render


def lands_on(pod_spec: dict, labels: dict[str, str]) -> bool:
    """Whether a node with `labels` satisfies the pod's required node affinity and nodeSelector."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    for term in terms:
        if all(
            (labels.get(e["key"]) in e["values"]) == (e["operator"] == "In")
            for e in term.get("matchExpressions") or []
        ):
            return True
    return False


def plugin_pod(*args: str) -> dict:
    return one(render(*args), "DaemonSet")["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"gpu.carve.dev/present": "true"}, True),  # labelled by hand: no NFD, no GPU Operator
        ({"feature.node.kubernetes.io/pci-10de.present": "true"}, True),
        ({"nvidia.com/gpu.present": "true"}, True),
        ({"kubernetes.io/os": "linux"}, False),  # a CPU node
    ],
)
def test_default_affinity_takes_gpu_nodes_however_labelled(labels, expected):
    assert lands_on(plugin_pod(), labels) == expected


def test_empty_affinity_without_node_selector_is_refused_with_the_way_out():
    with pytest.raises(RenderError) as e:
        render("--set", "plugin.affinity=null")
    assert "gpu.carve.dev/present=true" in str(e.value) and "plugin.everyNodeHasGpus" in str(e.value)


@pytest.mark.parametrize(
    "args",
    [
        ("--set", "plugin.affinity=null", "--set", "plugin.nodeSelector.gpu=yes"),
        ("--set", "plugin.affinity=null", "--set", "plugin.everyNodeHasGpus=true"),
        ("--set", "plugin.affinity=null", "--set", "plugin.gpus=fake:1xT4"),
    ],
)
def test_empty_affinity_is_fine_where_the_admin_said_where(args):
    pod = plugin_pod(*args)
    assert "affinity" not in pod or not pod["affinity"]


TOOLKIT_DIRS = ("/etc/nvidia-container-runtime", "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime")


def test_the_toolkit_configs_are_mounted_read_only_for_the_plugins_check():
    # Issue 29: toolkit nodes were neither detected nor guarded; the plugin reads the configs there.
    pod = plugin_pod()
    (plugin,) = [c for c in pod["containers"] if c["name"] == "plugin"]
    env = {e["name"]: e.get("value") for e in plugin["env"]}
    assert env["CARVE_TOOLKIT_ROOT"] == "/host-toolkit"
    mounts = {m["mountPath"]: m for m in plugin["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for host_dir in TOOLKIT_DIRS:
        mount = mounts[f"/host-toolkit{host_dir}"]
        assert mount["readOnly"] is True and volumes[mount["name"]]["hostPath"]["path"] == host_dir


def test_fake_gpus_have_no_toolkit_to_check():
    pod = plugin_pod("--set", "plugin.gpus=fake:1xT4")
    (plugin,) = [c for c in pod["containers"] if c["name"] == "plugin"]
    assert {e["name"]: e.get("value") for e in plugin["env"]}["CARVE_TOOLKIT_ROOT"] == ""
    assert not any("toolkit" in v["name"] for v in pod["volumes"])
