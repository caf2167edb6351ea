"""The chart as the e2e renders it: `helm template` of helm/carve with the e2e's values (fake GPUs, a minor
without DRA), the per-node plugin DaemonSet of plugin mode `daemonset`, and the values that point a release
at one local node. e2e/cluster/launcher.py applies or installs what these render."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from e2e.cluster.images import Image
from e2e.cluster.nodes import Node
from e2e.cluster.procs import StartError
from e2e.cluster.versions import REPO, Version

NAMESPACE = "carve-system"
RELEASE = "carve"
SERVICE_ACCOUNT = f"{RELEASE}-kubelet-plugin"
HELM = REPO / ".tools" / "helm"

# A minor without DRA (1.29) gets the chart as docs/legacy.md installs it there: no DRA plugin, no
# DeviceClasses, no admission policies for claims, no strategy controller (it partitions DRA GPUs).
NO_DRA_SETS = (
    "plugin.enabled=false",
    "deviceClasses.enabled=false",
    "validatingAdmissionPolicy.enabled=false",
    "controller.enabled=false",
)


CHART = REPO / "helm" / "carve"


def helm_template(release: str, version: Version, *args: str) -> str:
    """`helm template` of helm/carve for `version` with the fake-GPU values, then `args`."""
    argv = [str(HELM), "template", release, str(CHART), "--namespace", NAMESPACE]
    argv += ["--kube-version", version.patch.lstrip("v"), "-f", str(CHART / "ci" / "fake-gpus-values.yaml")]
    return subprocess.run([*argv, *args], check=True, capture_output=True, text=True).stdout


def render_chart(version: Version, *sets: str) -> str:
    """`helm template` of helm/carve as the e2e installs it (fake GPUs, the node label the kubelets set;
    on a minor without DRA, the DRA pieces off)."""
    # The plugin pod's containers are emulated (fake CRI): nothing to pull, no probes to answer.
    fixed = ("image.pullPolicy=IfNotPresent", "plugin.healthzPort=0", "plugin.metricsPort=0")
    every = (*fixed, *(() if version.dra else NO_DRA_SETS), *sets)
    return helm_template(RELEASE, version, *(arg for s in every for arg in ("--set", s)))


def without_plugin_daemonset(rendered: str) -> str:
    """The rendered chart less its plugin DaemonSet (plugin mode daemonset renders one per node)."""
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kept = [
        d
        for d in docs
        if not (
            d["kind"] == "DaemonSet"
            and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "kubelet-plugin"
        )
    ]
    if len(kept) != len(docs) - 1:
        raise StartError(f"the rendered chart has {len(docs) - len(kept)} plugin DaemonSets, not 1")
    return yaml.safe_dump_all(kept)


def node_values(node: Node, image: Image, api_port: int) -> dict:
    """The chart values that point the plugin DaemonSet at one local node: its paths, GPUs and strategy,
    a nodeSelector for it, the carve image, and the API server at the node's bridge address (there is no
    kube-proxy for the `kubernetes` Service), given as the in-cluster variables through `plugin.extraEnv`."""
    repository, tag = image.name.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "controller": {"enabled": False},
        "plugin": {
            "gpus": node.spec.gpus,
            "strategy": node.spec.strategy,
            "registryDir": str(node.registry_dir),
            "pluginDir": str(node.plugin_dir),
            "runDir": str(node.run_dir),
            "cdiDir": str(node.cdi_dir),
            "driverRoot": str(node.driver_root),
            # The MPS daemons' /dev/shm: this node's own, not the host-wide default under /run.
            "mpsShmDir": str(node.root / "mps-shm"),
            "publishInterval": 5,
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "extraEnv": [
                {"name": "KUBERNETES_SERVICE_HOST", "value": node.node_ip},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)},
            ],
        },
    }


def values_for_chart(values: dict, chart: Path) -> dict:
    """`values` less the keys `chart` does not know: a release before a value was added (an upgrade from it,
    e2e/test_upgrade_previous.py) refuses it (its values.schema.json allows no other keys). A key is left
    out where the chart's values.yaml has a map with keys and that key is not among them; maps the chart
    leaves empty (nodeSelector) keep whatever is given."""
    known = yaml.safe_load((chart / "values.yaml").read_text()) or {}

    def fit(given: dict, defaults: dict) -> dict:
        out = {}
        for key, value in given.items():
            default = defaults.get(key)
            if defaults and key not in defaults:
                continue
            out[key] = fit(value, default) if isinstance(value, dict) and isinstance(default, dict) else value
        return out

    return fit(values, known)


def node_daemonset(version: Version, node: Node, image: Image, api_port: int) -> str:
    """The chart's plugin DaemonSet for one node (`helm template --show-only templates/daemonset.yaml`).

    Every local node has its own kubelet root dir and CDI dir on this one host, so one DaemonSet for all of
    them cannot name their hostPaths: each node gets its own, rendered with `node_values` under a release
    name of its own (`carve-<node>`: its own DaemonSet name and selector labels) and the main release's
    ServiceAccount; everything else is the chart's."""
    values = {
        **node_values(node, image, api_port),
        "serviceAccount": {"create": False, "name": SERVICE_ACCOUNT},
    }
    path = node.root / "chart-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return helm_template(
        f"{RELEASE}-{node.name}", version, "--show-only", "templates/daemonset.yaml", "-f", str(path)
    )
