"""carve's plugin as the chart installs it: the chart's DaemonSet (its init container copying the limiter and
the CDI hook to the host, its hostPaths, probes, ServiceAccount token) running the carve image that
`make image` builds from the Dockerfile with buildah (e2e/cluster/carve_image.py), imported into the
node's containerd with no registry. A cluster of its own (plugin mode `daemonset`, one node; the
session's cluster runs the plugin as a host process). docs/e2e.md, "The plugin as the chart installs it".

Needs real containers: on a session asked for the fake CRI (CARVE_E2E_RUNTIME=fakecri) it is skipped,
naming the runtime. CARVE_E2E_DAEMONSET=0 leaves it out (it starts a second cluster)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from kubernetes import client

from driver import names
from e2e import kube
from e2e.cluster.chart import NAMESPACE
from e2e.cluster.launcher import Cluster
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.versions import DEFAULT_MINOR, resolve
from e2e.sessions import cluster_session

NODE = "e2e-d1"
LIMITER_FILES = (names.LIMITER_LIBRARY, "carve-cdi-hook", "carve-ldconfig")


@pytest.fixture(scope="module")
def ds_cluster():
    runtime = os.environ.get("CARVE_E2E_RUNTIME", "containerd")
    if runtime != "containerd":
        pytest.skip(f"the plugin's DaemonSet needs real containers; this session runs {runtime} on purpose")
    if os.environ.get("CARVE_E2E_DAEMONSET", "1") == "0":
        pytest.skip("CARVE_E2E_DAEMONSET=0")
    version = resolve(os.environ.get("CARVE_E2E_K8S", DEFAULT_MINOR), os.environ.get("CARVE_E2E_GATES", "on"))
    root = Path(tempfile.mkdtemp(prefix=f"carve-e2e-ds-{version.minor}-"))
    spec = NodeSpec(NODE, "fake:1xA100-80GB,1xT4", "soft")
    c = Cluster(version, root, specs=(spec,), runtime="containerd", plugin_mode="daemonset")
    yield from cluster_session(c, root, f"{version.label} daemonset cluster")


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_the_charts_daemonset_runs_the_plugin(ds_cluster):
    c = ds_cluster
    node = c.nodes[NODE]
    pod = kube.wait(f"the plugin pod on {NODE} Ready", lambda: (p := c.plugin_pod(NODE)) and _ready(p) and p)
    # It is the chart's pod: the DaemonSet's, on the image built here, with its init container done.
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name) == ("DaemonSet", f"carve-{NODE}-kubelet-plugin"), owner
    assert c.image and pod.spec.containers[0].image == c.image.name, pod.spec.containers[0].image
    # Its init containers (install-limiter; mps-shm, which makes the MPS shared-memory directory) all done.
    inits = {i.name: i for i in pod.status.init_container_statuses or []}
    assert set(inits) == {"install-limiter", "mps-shm"}, sorted(inits)
    assert all(i.state.terminated and i.state.terminated.exit_code == 0 for i in inits.values()), inits
    # Ready is the chart's startup probe on /healthz: the DRA socket answers and the kubelet has not
    # refused the registration. The sockets are in the kubelet's dirs on the host (hostPaths).
    assert pod.spec.containers[0].startup_probe.http_get.path == "/healthz"
    assert (node.plugin_dir / "dra.sock").is_socket()
    assert (node.registry_dir / f"{names.DRIVER_NAME}-reg.sock").is_socket()
    # The init container copied the limiter, the CDI hook and its ldconfig out of the image.
    for f in LIMITER_FILES:
        assert (node.plugin_dir / "lib" / f).stat().st_size > 0, f
    # The kubelet accepted the registration (NotifyRegistrationStatus, logged by the plugin in its pod) ...
    logs = c.kubectl("logs", "-n", NAMESPACE, pod.metadata.name, "-c", "plugin").stdout
    assert f"event=registration.accepted driver={names.DRIVER_NAME}" in logs, logs[-3000:]
    # ... and the plugin, with the token the kubelet gave its pod, published the node's pool: soft slices
    # (gates off: the fallback's slots) of its GPUs.
    slices = c.wait_slices(node)
    types = {d["attributes"]["type"]["string"] for s in slices for d in s["spec"].get("devices") or []}
    assert (names.TYPE_VGPU if c.version.gates_on else names.TYPE_SLOT) in types, types


def test_a_soft_slice_pod_is_prepared_by_the_daemonset_plugin(ds_cluster):
    c = ds_cluster
    api = c.api()
    node = c.nodes[NODE]
    namespace = "ds-soft"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    try:
        kube.create(api, namespace, kube.template("soft", kube.soft_or_slot(c.version.gates_on)))
        kube.create(api, namespace, kube.pod("soft", claim_template="soft", node=NODE))
        kube.wait_running(api, namespace, "soft", timeout_s=120)
        uid = kube.claim_of(api, namespace, "soft")["metadata"]["uid"]
        spec = node.cdi_specs().get(f"k8s.{names.DRIVER_NAME}-claim_{uid}.json")
        assert spec, f"no CDI spec for claim {uid} in {node.cdi_dir}"
        # The container got the limiter the init container installed, preloaded by the hook it copied.
        mounts = {m["containerPath"]: m["hostPath"] for m in spec["containerEdits"]["mounts"]}
        assert mounts[names.LIMITER_CONTAINER_PATH] == str(node.plugin_dir / "lib" / names.LIMITER_LIBRARY)
        out = c.kubectl("exec", "-n", namespace, "soft", "--", "sh", "-c", "cat /etc/ld.so.preload; env")
        assert out.stdout.splitlines()[0] == names.LIMITER_CONTAINER_PATH, out.stdout
        assert f"{names.ENV_MEMORY_LIMIT}_0=" in out.stdout, out.stdout
        # Deleting the pod unprepares through the same plugin.
        kube.delete_pod(api, namespace, "soft")
        kube.wait(f"CDI spec of claim {uid} removed", lambda: not node.cdi_specs())
    finally:
        kube.delete_namespace(api, namespace)
    # The plugin logged the prepare in its container (kubectl logs of the chart's pod).
    logs = c.kubectl("logs", "-n", NAMESPACE, c.plugin_pod(NODE).metadata.name, "-c", "plugin").stdout
    assert uid in logs, logs[-2000:]
