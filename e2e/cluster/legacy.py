"""The legacy shim (docs/legacy.md) on the local cluster: one more node whose real kubelet runs carve's
device plugin instead of the DRA plugin, and a second real kube-scheduler (`carve-scheduler`) that calls
`carve scheduler-extender`. Added to a running e2e Cluster (e2e/cluster/launcher.py) and removed again.

What comes from the chart: `helm template --set legacy.enabled=true` renders the legacy objects; the
ServiceAccounts, RBAC, the scheduler's ConfigMap and the device-plugin DaemonSet are applied as rendered.
The scheduler's `KubeSchedulerConfiguration` is the ConfigMap's, with the extender's port and a kubeconfig
filled in; the extender and the device plugin get the environment of their rendered containers (the
`CARVE_*` twins of their flags) plus the host paths of this node. Each runs as a host process with a token
of its own ServiceAccount, so the chart's RBAC is what they are held to (the device plugin's token is bound
to the DaemonSet's pod on the node, as for the DRA plugin).

The node runs on the fake CRI (e2e/test_legacy.py reads what the kubelet asked for) or, with
`runtime="containerd"`, on a real containerd (e2e/test_legacy_containers.py looks inside the containers).

The kubelet's device-plugin directory is not configurable (`/var/lib/kubelet/device-plugins`, fixed in
the kubelet); every kubelet on this host would share it and the last one started takes its socket. The
legacy node's kubelet therefore runs in a mount namespace of its own where that path is a bind mount of
`<node>/device-plugins`, and the device plugin uses `<node>/device-plugins` directly.
"""

from __future__ import annotations

import contextlib
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from driver import names
from e2e.cluster import kubeconfig
from e2e.cluster.chart import NAMESPACE, RELEASE, render_chart
from e2e.cluster.launcher import Cluster
from e2e.cluster.nodes import Node, NodeSpec
from e2e.cluster.procs import Proc, StartError, free_port, tail
from e2e.cluster.versions import REPO

LEGACY_NODE = NodeSpec("e2e-l1", "fake:2xA100-80GB,1xT4", "legacy")
KUBELET_DEVICE_PLUGIN_DIR = Path(names.DEVICE_PLUGIN_DIR)
PLUGIN_SA = f"{RELEASE}-legacy-device-plugin"
SCHEDULER_SA = f"{RELEASE}-legacy-scheduler"
CARVE = str(Path(sys.executable).parent / "carve")
METRICS_ENV = "CARVE_METRICS_ADDR"


def legacy_objects(cluster: Cluster, gpus: str) -> list[dict[str, Any]]:
    """The chart's legacy-*.yaml objects, as `helm template` renders them with the shim on."""
    rendered = render_chart(
        cluster.version,
        "legacy.enabled=true",
        "legacy.devicePlugin.gpus=" + gpus.replace(",", r"\,"),  # helm --set splits on commas
        "legacy.extender.resyncInterval=2",
        "legacy.extender.logLevel=debug",
    )
    docs = []
    for text in rendered.split("\n---"):
        source = next((ln for ln in text.splitlines() if ln.startswith("# Source: ")), "")
        if "/templates/legacy-" in source:
            doc = yaml.safe_load(text)
            if doc:
                docs.append(doc)
    return docs


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    """A rendered container's literal env values (fieldRef values are the host process's own flags)."""
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}


@dataclass
class LegacyShim:
    cluster: Cluster
    spec: NodeSpec = LEGACY_NODE
    node: Node | None = None
    objects: list[dict[str, Any]] = field(default_factory=list)
    device_plugin: Proc | None = None
    extender: Proc | None = None
    scheduler: Proc | None = None
    extender_port: int = 0
    # The chart's CARVE_METRICS_ADDR (":8082", ":8081") would take those ports of the host for every shim:
    # each serves its metrics on a free port of 127.0.0.1 instead (e2e/test_monitoring.py scrapes them).
    device_plugin_metrics_port: int = 0
    extender_metrics_port: int = 0
    runtime: str = "fakecri"  # the legacy node's container runtime (e2e/cluster/containerd.py RUNTIMES)
    delivery: str = ""  # --cdi-delivery of the device plugin ("": the chart's value)

    @property
    def root(self) -> Path:
        return self.cluster.root / self.spec.name

    @property
    def device_plugin_dir(self) -> Path:
        return self.root / "device-plugins"

    @property
    def state_dir(self) -> Path:
        return self.root / "legacy-state"

    def rendered(self, kind: str, suffix: str) -> dict[str, Any]:
        for o in self.objects:
            if o["kind"] == kind and o["metadata"]["name"] == f"{RELEASE}-{suffix}":
                return o
        raise LookupError(f"the chart renders no {kind} {RELEASE}-{suffix}")

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> LegacyShim:
        c = self.cluster
        try:
            self.objects = legacy_objects(c, self.spec.gpus)
            # The scheduler Deployment's containers run below as host processes (fake CRI: nothing runs).
            applied = [o for o in self.objects if o["kind"] != "Deployment"]
            c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(applied))
            self._start_node()
            self._start_device_plugin()
            self._start_extender()
            self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        containerd = self.node.containerd if self.node else None
        for proc in (
            self.scheduler,
            self.extender,
            self.device_plugin,
            self.node and self.node.kubelet,
            self.node and self.node.cri,
        ):
            if proc:
                if containerd and proc is self.node.cri:
                    containerd.kill_all()  # before containerd stops: runc's shims are daemons of their own
                proc.stop()
                with contextlib.suppress(ValueError):
                    self.cluster.sup.procs.remove(proc)
        if containerd:
            containerd.kill_shims()
            containerd.stop_network()
        # The stopped scheduler's and extender's Leases would hold off the next shim's for their duration.
        coord = client.CoordinationV1Api(self.cluster.api())
        for lease in self._lease_names():
            with contextlib.suppress(client.ApiException):
                coord.delete_namespaced_lease(lease, NAMESPACE)
        if self.node:
            with contextlib.suppress(client.ApiException):
                client.CoreV1Api(self.cluster.api()).delete_node(self.node.name)
            self.cluster.nodes.pop(self.node.name, None)

    def _lease_names(self) -> list[str]:
        with contextlib.suppress(LookupError):
            cm = self.rendered("ConfigMap", "legacy-scheduler")
            name = yaml.safe_load(cm["data"]["config.yaml"])["leaderElection"]["resourceName"]
            return [name, f"{name}-extender"]
        return []

    def _start_node(self) -> None:
        c = self.cluster
        self.device_plugin_dir.mkdir(parents=True, exist_ok=True)
        KUBELET_DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        # cwd: an empty directory. On the fake CRI the kubelet removes container "log" paths relative to
        # its working directory (seen: `remove .ci` in the repository, `remove cdi` in the node's root).
        (self.root / "kubelet-cwd").mkdir(parents=True, exist_ok=True)
        bind = f'mount --bind "$0" {KUBELET_DEVICE_PLUGIN_DIR} && cd "$0/../kubelet-cwd" && exec "$@"'
        self.node = Node(
            self.spec,
            self.root,
            c.version,
            c.sup,
            runtime=self.runtime,
            index=len(c.nodes) + 1,
            labels={names.LEGACY_NODE_LABEL: "true"},
            kubelet_wrapper=[
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                bind,
                str(self.device_plugin_dir),
            ],
        )
        assert c.cp.ca
        self.node.start_kubelet(c.cp.server, c.cp.ca)
        c.nodes[self.spec.name] = self.node
        c._wait_node_ready(self.node)

    def _token(self, sa: str, bound_pod: client.V1Pod | None = None) -> str:
        spec: dict[str, Any] = {"expirationSeconds": 4 * 3600}
        if bound_pod is not None:
            spec["boundObjectRef"] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": bound_pod.metadata.name,
                "uid": bound_pod.metadata.uid,
            }
        core = client.CoreV1Api(self.cluster.api())
        return core.create_namespaced_service_account_token(sa, NAMESPACE, {"spec": spec}).status.token

    def _kubeconfig(self, name: str, token: str) -> Path:
        c = self.cluster
        assert c.cp.ca
        return kubeconfig.write(self.root / f"{name}.kubeconfig", c.cp.server, c.cp.ca.path, token=token)

    def _daemonset_pod(self) -> client.V1Pod | None:
        core = client.CoreV1Api(self.cluster.api())
        pods = core.list_namespaced_pod(
            NAMESPACE,
            label_selector="app.kubernetes.io/component=legacy-device-plugin",
            field_selector=f"spec.nodeName={self.spec.name}",
        ).items
        return pods[0] if pods else None

    def restart_device_plugin(self, delivery: str) -> None:
        """Stop the device plugin and start it again with another --cdi-delivery; returns once it has
        registered with the kubelet again and the node reports its GPUs."""
        assert self.device_plugin
        registered = "event=registration.accepted"
        before = self.device_plugin.log.read_text().count(registered)
        self.device_plugin.stop()
        self.cluster.sup.procs.remove(self.device_plugin)
        # The kubelet reports the plugin's GPUs unhealthy once it is gone (allocatable 0); wait for that
        # report, so the node's GPUs seen below are the restarted plugin's (a pod the scheduler turns
        # down in that window would wait for its 5-minute flush: docs/legacy.md, "Kubelet restarts").
        core = client.CoreV1Api(self.cluster.api())
        with contextlib.suppress(StartError):
            self.cluster._wait(
                f"{names.LEGACY_GPU} unhealthy on {self.spec.name}",
                lambda: (
                    (core.read_node(self.spec.name).status.allocatable or {}).get(names.LEGACY_GPU, "0")
                    == "0"
                ),
                40,
            )
        self.delivery = delivery
        self._start_device_plugin(log_offset=before)

    def _start_device_plugin(self, log_offset: int = -1) -> None:
        assert self.node
        c = self.cluster
        log = c.root / "logs" / f"{self.spec.name}-device-plugin.log"
        if log_offset < 0 and log.exists():  # an earlier shim's plugin of this node: a registration of ours
            log_offset = log.read_text(errors="replace").count("event=registration.accepted")
        pod = c._wait(f"the legacy device-plugin pod on {self.spec.name}", self._daemonset_pod, 90)
        kc = self._kubeconfig("device-plugin", self._token(PLUGIN_SA, pod))
        ds = self.rendered("DaemonSet", "legacy-device-plugin")
        env = plain_env(ds["spec"]["template"]["spec"]["containers"][0])
        if self.delivery:
            env["CARVE_CDI_DELIVERY"] = self.delivery
        if METRICS_ENV in env:
            self.device_plugin_metrics_port = self.device_plugin_metrics_port or free_port()
            env[METRICS_ENV] = f"127.0.0.1:{self.device_plugin_metrics_port}"
        self.node.make_driver_root()
        argv = [
            CARVE,
            "device-plugin",
            "--node-name",
            self.spec.name,
            "--kubeconfig",
            str(kc),
            "--device-plugin-dir",
            str(self.device_plugin_dir),
            "--pod-resources-socket",
            str(self.node.kubelet_dir / "pod-resources" / "kubelet.sock"),
            "--state-dir",
            str(self.state_dir),
            "--cdi-dir",
            str(self.node.cdi_dir),
            "--driver-root",
            str(self.node.driver_root),
            "--host-driver-root",
            str(self.node.driver_root),
            # The chart's init container copies the limiter and hooks to <stateDir>/lib; here: the build.
            "--limiter-dir",
            str(REPO / "native" / "build"),
        ]
        self.device_plugin = c.sup.start(f"{self.spec.name}-device-plugin", argv, env=env)
        self.wait_advertised(log_offset)

    def wait_advertised(self, log_offset: int = -1, timeout_s: float = 90) -> None:
        """Until the device plugin has registered (again: more often than `log_offset` times in its log)
        and the node reports its GPUs and inventory."""
        c = self.cluster
        core = client.CoreV1Api(c.api())
        assert self.device_plugin

        def advertised():
            assert self.device_plugin
            if not self.device_plugin.alive():
                raise StartError(f"device plugin exited:\n{tail(self.device_plugin.log)}")
            # A restart (the same log file): registered again, not only still advertised from before.
            if self.device_plugin.log.read_text().count("event=registration.accepted") <= log_offset:
                return False
            n = core.read_node(self.spec.name)
            return (n.status.allocatable or {}).get(names.LEGACY_GPU, "0") != "0" and (
                names.LEGACY_INVENTORY_ANNOTATION in (n.metadata.annotations or {})
            )

        c._wait(f"{names.LEGACY_GPU} on node {self.spec.name}", advertised, timeout_s)

    def _start_extender(self) -> None:
        c = self.cluster
        dep = self.rendered("Deployment", "legacy-scheduler")
        container = next(x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == "extender")
        env = plain_env(container)
        self.extender_port = free_port()
        if METRICS_ENV in env:
            self.extender_metrics_port = free_port()
            env[METRICS_ENV] = f"127.0.0.1:{self.extender_metrics_port}"
        kc = self._kubeconfig("extender", self._token(SCHEDULER_SA))
        argv = [
            CARVE,
            "scheduler-extender",
            "--addr",
            f"127.0.0.1:{self.extender_port}",
            "--kubeconfig",
            str(kc),
            "--identity",
            "e2e-extender-0",
        ]
        self.extender = c.sup.start("legacy-extender", argv, env=env)
        self.wait_extender_ready()

    def wait_extender_ready(self, timeout_s: float = 60) -> None:
        assert self.extender
        url = f"http://127.0.0.1:{self.extender_port}/readyz"

        def ready() -> bool:
            return urllib.request.urlopen(url, timeout=2).status == 200

        self.cluster.sup.wait(self.extender, "/readyz", ready, timeout_s)

    def scheduler_config(self, kc: Path) -> dict[str, Any]:
        """The chart's KubeSchedulerConfiguration with this extender's port and a kubeconfig."""
        cm = self.rendered("ConfigMap", "legacy-scheduler")
        config = yaml.safe_load(cm["data"]["config.yaml"])
        for ext in config["extenders"]:
            ext["urlPrefix"] = f"http://127.0.0.1:{self.extender_port}"
        config["clientConnection"] = {"kubeconfig": str(kc)}
        return config

    def _start_scheduler(self) -> None:
        c = self.cluster
        kc = self._kubeconfig("scheduler", self._token(SCHEDULER_SA))
        cfg = self.root / "carve-scheduler.yaml"
        config = self.scheduler_config(kc)
        cfg.write_text(yaml.safe_dump(config))
        self.scheduler = c.sup.start(
            "carve-scheduler",
            [
                c.version.binary,
                "scheduler",
                f"--config={cfg}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=2",
                *c.version.gates_flag(),
            ],
        )
        coord = client.CoordinationV1Api(c.api())
        name = config["leaderElection"]["resourceName"]

        def leading():
            if not self.scheduler.alive():
                raise StartError(f"carve-scheduler exited:\n{tail(self.scheduler.log)}")
            with contextlib.suppress(client.ApiException):
                return bool(coord.read_namespaced_lease(name, NAMESPACE).spec.holder_identity)
            return False

        c._wait("carve-scheduler's leader Lease", leading, 90)
