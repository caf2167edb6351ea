"""The local cluster for carve's e2e: control plane, the chart's objects, N nodes (real kubelets on
containerd + runc, or on a recording fake CRI) and carve's plugin per node: a host process (plugin mode
`host`, the default), or the chart's DaemonSet running the carve image built here (`daemonset`, real
containers only; one DaemonSet per node, see `node_daemonset`), or the whole chart as `helm install` puts it
on a one-node cluster (`helm`: a real Helm release, which `helm upgrade` and `helm rollback` can change).
`python -m e2e.cluster.launcher --k8s 1.37` (also `make cluster-up`) starts one and keeps it until Ctrl-C;
e2e/conftest.py starts one per test session.

Every process is a child of this one and is stopped by pid when the cluster stops (also on an error while
starting, and at interpreter exit)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client

from driver import names
from driver.cluster.kube import load_api_client
from e2e.cluster import carve_image
from e2e.cluster.chart import (
    HELM,
    NAMESPACE,
    RELEASE,
    SERVICE_ACCOUNT,
    node_daemonset,
    node_values,
    render_chart,
    values_for_chart,
    without_plugin_daemonset,
)
from e2e.cluster.containerd import RUNTIMES
from e2e.cluster.controlplane import ControlPlane
from e2e.cluster.images import Image
from e2e.cluster.nodes import Node, NodeSpec
from e2e.cluster.procs import StartError, Supervisor, tail
from e2e.cluster.versions import DEFAULT_MINOR, REPO, Version, resolve

KUBECTL = REPO / ".tools" / "kubectl"

# Two nodes cover the five strategies; e2e-n1 holds the only MIG GPU (0) and the only soft GPUs (1: an
# A100-80GB, 2: a T4) of the cluster, so what the scheduler can place there is fixed by the tests.
DEFAULT_NODES = (
    NodeSpec("e2e-n1", "fake:2xA100-80GB,1xT4", "0=mig,soft"),
    NodeSpec("e2e-n2", "fake:2xA100-80GB,1xT4", "0=exclusive,1=timeslice,slots"),
)
# How carve's plugin runs on each node: a host process with a token of the chart's ServiceAccount, or the
# chart's DaemonSet (its pod, init container and hostPaths) from the locally built carve image, applied
# from `helm template` per node, or installed with `helm install` as one release (one node only).
PLUGIN_MODES = ("host", "daemonset", "helm")


@dataclass
class Cluster:
    version: Version
    root: Path
    specs: tuple[NodeSpec, ...] | None = None  # None: DEFAULT_NODES, or none on a minor without DRA
    runtime: str = "containerd"  # the nodes' container runtime (e2e/cluster/containerd.py RUNTIMES)
    plugin_mode: str = "host"  # PLUGIN_MODES
    image: Image | None = None  # plugin mode daemonset: the carve image (e2e/cluster/carve_image.py)
    # Plugin mode helm: what `helm install` installs, when not this tree's chart and the image built here:
    # a previous release's chart and image (e2e/cluster/previous.py); both images are on the node.
    release_chart: Path | None = None
    release_image: Image | None = None
    state_tmpfs_mib: int = 0  # > 0: each plugin's state directory on a tmpfs that size (Node.state_tmpfs_mib)
    sup: Supervisor = field(init=False)
    cp: ControlPlane = field(init=False)
    nodes: dict[str, Node] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.specs is None:
            # Without DRA the DRA plugin's nodes have nothing to run; e2e/cluster/legacy.py adds its node.
            self.specs = DEFAULT_NODES if self.version.dra else ()
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self.sup = Supervisor(self.root / "logs")
        if self.plugin_mode not in PLUGIN_MODES:
            raise ValueError(f"plugin mode {self.plugin_mode!r} is not one of {', '.join(PLUGIN_MODES)}")
        self.cp = ControlPlane(
            self.version, self.root / "control-plane", self.sup, pod_reachable=self.daemonset
        )

    @property
    def daemonset(self) -> bool:
        """The plugin runs in the chart's DaemonSet pod (per-node template or Helm release)."""
        return self.plugin_mode in ("daemonset", "helm")

    @property
    def helm_release(self) -> bool:
        return self.plugin_mode == "helm"

    @property
    def kubeconfig(self) -> Path:
        assert self.cp.admin_kubeconfig
        return self.cp.admin_kubeconfig

    def api(self) -> client.ApiClient:
        return load_api_client(self.kubeconfig)

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        argv = [str(KUBECTL), "--kubeconfig", str(self.kubeconfig), *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            # kubectl's own words (which object, which field) are the useful part of a failure
            raise StartError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def helm(self, *args: str) -> subprocess.CompletedProcess:
        """`helm <args>` in the release's namespace; a failure raises StartError with helm's own words."""
        argv = [str(HELM), "--kubeconfig", str(self.kubeconfig), "--namespace", NAMESPACE, *args]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StartError(f"helm {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def helm_values(
        self, node: Node, image: Image | None = None, chart: Path | None = None, **plugin: object
    ) -> Path:
        """A values file for the one-node release (`node_values`, the chart's own ServiceAccount), with
        `plugin` settings over it; for `helm install` and `helm upgrade -f`. `image` (default: the one
        built here) runs the plugin; `chart` (default: this tree's) drops what it does not know."""
        image = image or self.image
        assert image
        values = node_values(node, image, int(self.cp.server.rsplit(":", 1)[1]))
        values["plugin"].update(plugin)
        if chart is not None:
            values = values_for_chart(values, chart)
        path = node.root / f"release-values-{len(list(node.root.glob('release-values-*')))}.yaml"
        path.write_text(yaml.safe_dump(values))
        return path

    def apply_crds(self) -> None:
        """The chart's CRDs (helm/carve/crds: `helm template` leaves them out, as `helm install` applies
        them first), applied and established before the chart's objects that use them."""
        crds = sorted((REPO / "helm" / "carve" / "crds").glob("*.yaml"))
        self.kubectl("apply", *(a for c in crds for a in ("-f", str(c))))
        names = [f"crd/{c.name.removesuffix('.yaml')}" for c in crds]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)

    def start_checks(self) -> None:
        """What must hold before anything starts; a StartError names what is missing or refused."""
        if self.daemonset and self.runtime != "containerd":
            raise StartError(
                f"plugin mode {self.plugin_mode} runs the plugin in a container: not on {self.runtime}"
            )
        if self.helm_release and len(self.specs or ()) != 1:
            # One release's DaemonSet can name the hostPaths of one local node only.
            raise StartError("plugin mode helm installs one release, for exactly one node")
        if not self.version.binary.exists():
            raise StartError(
                f"{self.version.binary} is not built: run `make cluster K8S={self.version.minor}`"
            )

    def start(self) -> Cluster:
        self.start_checks()
        atexit.register(self.stop)
        try:
            t0 = time.monotonic()
            if self.daemonset:
                self.image = carve_image.build()
                self.timings["carve image"] = time.monotonic() - t0
            self.cp.start()
            self.timings["control plane"] = time.monotonic() - t0
            self._wait_default_sa()
            self.kubectl("create", "namespace", NAMESPACE)
            # Plugin mode helm: `helm install`, once the node is up, applies the CRDs and the whole chart.
            if self.plugin_mode == "daemonset":
                self.apply_crds()
                # The chart's DaemonSet is replaced by the per-node ones below (node_daemonset); the
                # strategy controller is not part of what this mode checks (its pods would run the image).
                chart = render_chart(self.version, "controller.enabled=false")
                self.kubectl("apply", "-f", "-", stdin=without_plugin_daemonset(chart))
            elif self.plugin_mode == "host":
                self.apply_crds()
                self.kubectl("apply", "-f", "-", stdin=render_chart(self.version))
            assert self.specs is not None
            for i, spec in enumerate(self.specs, 1):
                node = Node(
                    spec,
                    self.root / spec.name,
                    self.version,
                    self.sup,
                    runtime=self.runtime,
                    index=i,
                    extra_images=tuple(i for i in (self.image, self.release_image) if i),
                    state_tmpfs_mib=self.state_tmpfs_mib,
                )
                node.start_kubelet(self.cp.server, self.cp.ca)
                self.nodes[spec.name] = node
            for node in self.nodes.values():
                self._wait_node_ready(node)
            self.timings["nodes ready"] = time.monotonic() - t0
            for node in self.nodes.values():
                if self.helm_release:
                    node.make_driver_root()
                    node.mount_run_tmpfs()  # the chart's runDir: a tmpfs, as /run on a host
                    chart = self.release_chart or REPO / "helm" / "carve"
                    values = chart / "ci" / "fake-gpus-values.yaml"
                    self.helm(
                        "install",
                        RELEASE,
                        str(chart),
                        "-f",
                        str(values),
                        "-f",
                        str(self.helm_values(node, self.release_image, self.release_chart)),
                    )
                elif self.daemonset:
                    assert self.image
                    port = int(self.cp.server.rsplit(":", 1)[1])
                    node.make_driver_root()
                    node.mount_run_tmpfs()  # the chart's runDir: a tmpfs, as /run on a host
                    self.kubectl(
                        "apply", "-f", "-", stdin=node_daemonset(self.version, node, self.image, port)
                    )
                else:
                    node.start_plugin(self.cp.server, self.cp.ca.path, self.plugin_token(node.name))
            for node in self.nodes.values():
                # A plugin pod starts Python in a container first: slower than the host process.
                self.wait_slices(node, timeout_s=240 if self.daemonset else 90)
            if self.nodes:
                self.timings["slices published"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.kubelet:
                node.kubelet.stop()  # first, so it restarts nothing the runtime is stopping
            if node.containerd:
                node.containerd.kill_all()
        self.sup.stop_all()
        for node in self.nodes.values():
            if node.containerd:
                node.containerd.kill_shims()
                node.containerd.stop_network()

    def unmount_all(self) -> None:
        """The kubelets mount volumes (tmpfs) under their root dirs: unmount what is left, deepest first."""
        root = str(self.root.resolve())
        with open("/proc/self/mounts") as f:
            points = [line.split()[1] for line in f if line.split()[1].startswith(root + "/")]
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)

    # --- helpers the tests use -------------------------------------------------------------------------

    def plugin_pod(self, node: str) -> client.V1Pod:
        core = client.CoreV1Api(self.api())
        pods = core.list_namespaced_pod(
            NAMESPACE,
            label_selector="app.kubernetes.io/component=kubelet-plugin",
            field_selector=f"spec.nodeName={node}",
        ).items
        if not pods:
            raise LookupError(f"no plugin pod of the chart's DaemonSet on {node}")
        return pods[0]

    def plugin_token(self, node: str, timeout_s: float = 90.0) -> str:
        """A token of the chart's ServiceAccount bound to the DaemonSet's pod on `node`: the API server adds
        the pod's node name to the token's user info, which the chart's admission policy checks."""
        pod = self._wait(f"the plugin pod on {node}", lambda: self._maybe(self.plugin_pod, node), timeout_s)
        core = client.CoreV1Api(self.api())
        request = core.create_namespaced_service_account_token(
            SERVICE_ACCOUNT,
            NAMESPACE,
            {
                "spec": {
                    "expirationSeconds": 4 * 3600,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod.metadata.name,
                        "uid": pod.metadata.uid,
                    },
                }
            },
        )
        return request.status.token

    def slices(self, node: str | None = None) -> list[dict]:
        objs = client.CustomObjectsApi(self.api()).list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices"
        )["items"]
        return [
            s
            for s in objs
            if s["spec"]["driver"] == names.DRIVER_NAME
            and (node is None or s["spec"].get("nodeName") == node)
        ]

    def wait_slices(self, node: Node, timeout_s: float = 90.0) -> list[dict]:
        def published():
            if node.plugin and not node.plugin.alive():
                raise StartError(f"{node.name} plugin exited:\n{tail(node.plugin.log)}")
            return self.slices(node.name)

        return self._wait(f"{node.name}'s ResourceSlices", published, timeout_s)

    def _wait_default_sa(self) -> None:
        core = client.CoreV1Api(self.api())
        self._wait(
            "namespace default's ServiceAccount",
            lambda: self._maybe(core.read_namespaced_service_account, "default", "default"),
            90,
        )

    def _wait_node_ready(self, node: Node, timeout_s: float = 120.0) -> None:
        core = client.CoreV1Api(self.api())

        def ready():
            assert node.kubelet
            if not node.kubelet.alive():
                raise StartError(f"{node.name} kubelet exited:\n{tail(node.kubelet.log)}")
            n = self._maybe(core.read_node, node.name)
            conds = {c.type: c.status for c in (n.status.conditions or [])} if n else {}
            taints = [t.key for t in (n.spec.taints or [])] if n else ["?"]
            return conds.get("Ready") == "True" and not taints

        self._wait(f"node {node.name} Ready and untainted", ready, timeout_s)

    @staticmethod
    def _maybe(fn, *args):
        with contextlib.suppress(client.ApiException, LookupError):
            return fn(*args)
        return None

    @staticmethod
    def _wait(what: str, check, timeout_s: float, every_s: float = 0.5):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = check()
            if got:
                return got
            time.sleep(every_s)
        raise StartError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cluster-up", description=__doc__)
    p.add_argument("--k8s", default=DEFAULT_MINOR, help="Kubernetes minor (e2e/cluster/<minor>)")
    p.add_argument("--gates", default="on", choices=("on", "off"), help="the alpha DRA gates (1.34/1.35)")
    p.add_argument("--runtime", default="containerd", choices=RUNTIMES, help="the nodes' container runtime")
    p.add_argument(
        "--plugin-mode",
        default="host",
        choices=PLUGIN_MODES,
        help="carve's plugin as a host process, or the chart's DaemonSet (carve image built here), or the "
        "chart as a Helm release (its first node only)",
    )
    p.add_argument("--dir", default="", help="working directory (default: a new temporary one)")
    args = p.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="carve-e2e-"))
    specs = DEFAULT_NODES[:1] if args.plugin_mode == "helm" else None  # one release, one node's hostPaths
    version = resolve(args.k8s, args.gates)
    cluster = Cluster(version, root, specs=specs, runtime=args.runtime, plugin_mode=args.plugin_mode)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        cluster.start()
        print(f"cluster {cluster.version.label} up in {root}; timings {cluster.timings}")
        print(f"export KUBECONFIG={cluster.kubeconfig}   # logs: {root / 'logs'}; Ctrl-C stops it")
        while all(p.alive() for p in cluster.sup.procs):
            time.sleep(1)
        dead = [p.name for p in cluster.sup.procs if not p.alive()]
        print(f"stopping: {', '.join(dead)} exited")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()
        cluster.unmount_all()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
