"""Plugin mode `helm` of the e2e launcher (e2e/test_upgrade.py installs, upgrades and rolls back a release
with it): the values it gives `helm install` make the chart's one DaemonSet serve the local node (its
hostPaths, its node, the ServiceAccount the launcher's token code expects), and the changes the upgrade
test makes reach the pod template, so that `helm upgrade` does roll the plugin pod."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.helm_render import FAKE_VALUES, env_of, one, plugin_container, render

from e2e.cluster.chart import RELEASE, SERVICE_ACCOUNT, node_daemonset, node_values
from e2e.cluster.images import Image
from e2e.cluster.launcher import PLUGIN_MODES, Cluster
from e2e.cluster.nodes import Node, NodeSpec
from e2e.cluster.procs import StartError, Supervisor
from e2e.cluster.versions import resolve

IMAGE = Image("localhost/carve:0.1.0", Path("dist/carve-0.1.0.oci.tar"))


@pytest.fixture
def node(tmp_path: Path) -> Node:
    spec = NodeSpec("e2e-u1", "fake:3xA100-80GB,1xT4", "0=mig,1=timeslice,2=exclusive,soft")
    return Node(spec, tmp_path / "e2e-u1", resolve("1.37"), Supervisor(tmp_path / "logs"))


def _release(node: Node, tmp_path: Path, *sets: str) -> list[dict]:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(node_values(node, IMAGE, 6443)))
    args = ["-f", str(FAKE_VALUES), "-f", str(values)]
    for s in sets:
        args += ["--set", s]
    return render(*args, kube_version="1.36.0")


def test_the_release_runs_one_plugin_daemonset_on_the_nodes_paths(node: Node, tmp_path: Path):
    objects = _release(node, tmp_path)
    ds = one(objects, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "e2e-u1"}
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    for path in (node.plugin_dir, node.registry_dir, node.cdi_dir, node.driver_root):
        assert str(path) in host_paths, (path, host_paths)
    container = plugin_container(objects)
    assert container["image"] == IMAGE.name
    assert env_of(container)["KUBERNETES_SERVICE_HOST"] == node.node_ip
    # the controller is off: its Deployment would run the same image, which this mode does not check
    assert not [o for o in objects if o["kind"] == "Deployment"]


@pytest.mark.parametrize("change", ["image.tag=0.1.0-upgrade", "plugin.logLevel=debug"])
def test_the_upgrades_changes_reach_the_pod_template(node: Node, tmp_path: Path, change: str):
    before = one(_release(node, tmp_path), "DaemonSet")["spec"]["template"]
    after = one(_release(node, tmp_path, change), "DaemonSet")["spec"]["template"]
    assert before != after


def test_helm_mode_is_refused_for_more_than_one_node(tmp_path: Path):
    assert "helm" in PLUGIN_MODES
    specs = (NodeSpec("a", "fake:1xT4", "soft"), NodeSpec("b", "fake:1xT4", "soft"))
    c = Cluster(resolve("1.37"), tmp_path, specs=specs, plugin_mode="helm")
    with pytest.raises(StartError, match="one release, for exactly one node"):
        c.start_checks()


def test_plugin_mode_daemonset_renders_one_daemonset_per_node_under_its_own_release(node: Node):
    """node_daemonset: the chart's DaemonSet alone, named and selected by a release of the node's own, on
    the node's hostPaths, with the main release's ServiceAccount (which it does not create)."""
    node.root.mkdir(parents=True)
    (ds,) = [d for d in yaml.safe_load_all(node_daemonset(resolve("1.37"), node, IMAGE, 6443)) if d]
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["name"].startswith(f"{RELEASE}-{node.name}")
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": node.name}
    assert str(node.plugin_dir) in {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
