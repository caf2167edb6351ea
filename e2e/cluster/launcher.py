"""The local cluster for carve's e2e: control plane, the chart's objects, N nodes (real kubelets on
containerd + runc, or on a recording fake CRI) and carve's plugin per node.
`python -m e2e.cluster.launcher --k8s 1.36` (also `make cluster-up`) starts one and keeps it until Ctrl-C;
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

from kubernetes import client

from driver import names
from driver.cluster.kube import load_api_client
from e2e.cluster.containerd import RUNTIMES
from e2e.cluster.controlplane import ControlPlane
from e2e.cluster.nodes import Node, NodeSpec
from e2e.cluster.procs import StartError, Supervisor, tail
from e2e.cluster.versions import REPO, Version, resolve

NAMESPACE = "carve-system"
RELEASE = "carve"
SERVICE_ACCOUNT = f"{RELEASE}-kubelet-plugin"
HELM = REPO / ".tools" / "helm"
KUBECTL = REPO / ".tools" / "kubectl"

# Two nodes cover the five strategies; e2e-n1 holds the only MIG GPU (0) and the only soft GPUs (1: an
# A100-80GB, 2: a T4) of the cluster, so what the scheduler can place there is fixed by the tests.
DEFAULT_NODES = (
    NodeSpec("e2e-n1", "fake:2xA100-80GB,1xT4", "0=mig,soft"),
    NodeSpec("e2e-n2", "fake:2xA100-80GB,1xT4", "0=exclusive,1=timeslice,slots"),
)


# A minor without DRA (1.29) gets the chart as docs/legacy.md installs it there: no DRA plugin, no
# DeviceClasses, no admission policies for claims, no strategy controller (it partitions DRA GPUs).
NO_DRA_SETS = (
    "plugin.enabled=false",
    "deviceClasses.enabled=false",
    "validatingAdmissionPolicy.enabled=false",
    "controller.enabled=false",
)


def render_chart(version: Version, *sets: str) -> str:
    """`helm template` of helm/carve as the e2e installs it (fake GPUs, the node label the kubelets set;
    on a minor without DRA, the DRA pieces off)."""
    argv = [
        str(HELM),
        "template",
        RELEASE,
        str(REPO / "helm" / "carve"),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        version.patch.lstrip("v"),
        "-f",
        str(REPO / "helm" / "carve" / "ci" / "fake-gpus-values.yaml"),
        # The plugin pod's containers are emulated (fake CRI): nothing to pull, no probes to answer.
        "--set",
        "image.pullPolicy=IfNotPresent",
        "--set",
        "plugin.healthzPort=0",
        "--set",
        "plugin.metricsPort=0",
    ]
    for s in (*(() if version.dra else NO_DRA_SETS), *sets):
        argv += ["--set", s]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


@dataclass
class Cluster:
    version: Version
    root: Path
    specs: tuple[NodeSpec, ...] | None = None  # None: DEFAULT_NODES, or none on a minor without DRA
    runtime: str = "containerd"  # the nodes' container runtime (e2e/cluster/containerd.py RUNTIMES)
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
        self.cp = ControlPlane(self.version, self.root / "control-plane", self.sup)

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

    def apply_crds(self) -> None:
        """The chart's CRDs (helm/carve/crds: `helm template` leaves them out, as `helm install` applies
        them first), applied and established before the chart's objects that use them."""
        crds = sorted((REPO / "helm" / "carve" / "crds").glob("*.yaml"))
        self.kubectl("apply", *(a for c in crds for a in ("-f", str(c))))
        names = [f"crd/{c.name.removesuffix('.yaml')}" for c in crds]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)

    def start(self) -> Cluster:
        if not self.version.binary.exists():
            raise StartError(
                f"{self.version.binary} is not built: run `make cluster K8S={self.version.minor}`"
            )
        atexit.register(self.stop)
        try:
            t0 = time.monotonic()
            self.cp.start()
            self.timings["control plane"] = time.monotonic() - t0
            self._wait_default_sa()
            self.kubectl("create", "namespace", NAMESPACE)
            self.apply_crds()
            self.kubectl("apply", "-f", "-", stdin=render_chart(self.version))
            assert self.specs is not None
            for i, spec in enumerate(self.specs, 1):
                node = Node(
                    spec, self.root / spec.name, self.version, self.sup, runtime=self.runtime, index=i
                )
                node.start_kubelet(self.cp.server, self.cp.ca)
                self.nodes[spec.name] = node
            for node in self.nodes.values():
                self._wait_node_ready(node)
            self.timings["nodes ready"] = time.monotonic() - t0
            for node in self.nodes.values():
                node.start_plugin(self.cp.server, self.cp.ca.path, self.plugin_token(node.name))
            for node in self.nodes.values():
                self.wait_slices(node)
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
    p.add_argument("--k8s", default="1.36", help="Kubernetes minor (e2e/cluster/<minor>)")
    p.add_argument("--gates", default="on", choices=("on", "off"), help="the alpha DRA gates (1.34/1.35)")
    p.add_argument("--runtime", default="containerd", choices=RUNTIMES, help="the nodes' container runtime")
    p.add_argument("--dir", default="", help="working directory (default: a new temporary one)")
    args = p.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="carve-e2e-"))
    cluster = Cluster(resolve(args.k8s, args.gates), root, runtime=args.runtime)
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
