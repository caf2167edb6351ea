"""The strategy controller (docs/controller.md) on the local cluster: one more node whose GPUs the
controller may repartition, its carve plugin, a PartitioningPolicy that names only that node, and
`carve controller` as a host process. Added to a running e2e Cluster (e2e/cluster/launcher.py) and removed
again.

The controller runs with the environment of the chart's rendered controller container (the `CARVE_*`
twins of its flags) and a token of the chart's controller ServiceAccount, so the chart's RBAC is what it
is held to; it leads through the chart's Lease name in the release namespace, as the Deployment would.
The policy names the added node only (by a label of its own): the session's other nodes, whose strategies
the other tests rely on, match no rule and are left alone.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e.cluster import kubeconfig
from e2e.cluster.chart import NAMESPACE, RELEASE, render_chart
from e2e.cluster.launcher import Cluster
from e2e.cluster.nodes import PLUGIN_LABEL, Node, NodeSpec
from e2e.cluster.procs import Proc, StartError, free_port, tail

CONTROLLER_SA = f"{RELEASE}-controller"
CARVE = str(Path(sys.executable).parent / "carve")
NODE_LABEL = "carve.dev/e2e-controller"  # the label the policy's only rule selects
POLICY = "e2e-controller"
GROUP, VERSION = "carve.dev", "v1alpha1"
# Every GPU soft (the policy's default), A100-80GB: MIG-capable, so the controller may switch one.
CONTROLLER_NODE = NodeSpec("e2e-c1", "fake:2xA100-80GB", "soft")


def controller_container(cluster: Cluster) -> dict[str, Any]:
    """The chart's controller container, as `helm template` renders it."""
    for doc in yaml.safe_load_all(render_chart(cluster.version)):
        if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == CONTROLLER_SA:
            return doc["spec"]["template"]["spec"]["containers"][0]
    raise LookupError(f"the chart renders no Deployment {CONTROLLER_SA}")


def policy_object(min_hold: str, max_changes_per_hour: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PartitioningPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "nodes": [
                {
                    "nodeSelector": {"matchLabels": {NODE_LABEL: "true"}},
                    "allowedStrategies": ["soft", "mig"],
                    "defaultStrategy": "soft",
                }
            ],
            "hysteresis": {"minHold": min_hold, "maxChangesPerHour": max_changes_per_hour},
        },
    }


@dataclass
class StrategyController:
    cluster: Cluster
    spec: NodeSpec = CONTROLLER_NODE
    min_hold: str = "5s"
    max_changes_per_hour: int = 10
    node: Node | None = None
    controller: Proc | None = None
    metrics_port: int = 0
    extra_args: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def root(self) -> Path:
        return self.cluster.root / self.spec.name

    def start(self) -> StrategyController:
        try:
            self._create_policy()
            self._start_node()
            self._start_controller()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        c = self.cluster
        node = self.node
        if node and node.kubelet:
            node.kubelet.stop()
        if node and node.containerd:
            node.containerd.kill_all()
        for proc in (self.controller, node and node.plugin, node and node.kubelet, node and node.cri):
            if proc:
                proc.stop()
                with contextlib.suppress(ValueError):
                    c.sup.procs.remove(proc)
        if node and node.containerd:
            node.containerd.kill_shims()
            node.containerd.stop_network()
        custom = client.CustomObjectsApi(c.api())
        for plural, name in (("nodepartitionings", self.name), ("partitioningpolicies", POLICY)):
            with contextlib.suppress(client.ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        if node:
            with contextlib.suppress(client.ApiException):
                client.CoreV1Api(c.api()).delete_node(node.name)
            # The stopped plugin's pool goes with its node: later tests list every node's slices.
            with contextlib.suppress(client.ApiException):
                client.ResourceV1Api(c.api()).delete_collection_resource_slice(
                    field_selector=f"spec.nodeName={node.name}"
                )
            c.nodes.pop(node.name, None)

    def _create_policy(self) -> None:
        custom = client.CustomObjectsApi(self.cluster.api())
        custom.create_cluster_custom_object(
            GROUP, VERSION, "partitioningpolicies", policy_object(self.min_hold, self.max_changes_per_hour)
        )

    def _start_node(self) -> None:
        c = self.cluster
        assert c.cp.ca
        self.node = Node(
            self.spec,
            self.root,
            c.version,
            c.sup,
            runtime=c.runtime,
            index=len(c.nodes) + 1,
            labels={PLUGIN_LABEL: "true", NODE_LABEL: "true"},
        )
        self.node.start_kubelet(c.cp.server, c.cp.ca)
        c.nodes[self.name] = self.node
        c._wait_node_ready(self.node)
        # The plugin follows its NodePartitioning (--node-partitioning defaults to true).
        self.node.start_plugin(c.cp.server, c.cp.ca.path, c.plugin_token(self.name))
        c.wait_slices(self.node)

    def _token(self) -> str:
        core = client.CoreV1Api(self.cluster.api())
        request = core.create_namespaced_service_account_token(
            CONTROLLER_SA, NAMESPACE, {"spec": {"expirationSeconds": 4 * 3600}}
        )
        return request.status.token

    def _start_controller(self) -> None:
        c = self.cluster
        assert c.cp.ca
        kc = kubeconfig.write(
            self.root / "controller.kubeconfig", c.cp.server, c.cp.ca.path, token=self._token()
        )
        container = controller_container(c)
        # The literal env of the rendered container (policy, interval, lease name, ...); the fieldRef
        # values (POD_NAME, POD_NAMESPACE) become flags.
        env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
        self.metrics_port = free_port()
        argv = [
            CARVE,
            *container["args"],
            "--kubeconfig",
            str(kc),
            "--lease-namespace",
            NAMESPACE,
            "--identity",
            "e2e-controller-0",
            "--metrics-addr",
            f"127.0.0.1:{self.metrics_port}",
            # Quicker than the chart's defaults, for a test: the policy of this test, a claim is the
            # scheduler's for 1 s, a plan at least every 2 s.
            "--policy",
            POLICY,
            "--grace",
            "1",
            "--interval",
            "2",
            # The chart passes its one plugin.strategy to the plugins and the controller alike; this node's
            # plugin runs its own (`spec.strategy`), so the controller must be told that one, or it takes
            # GPUs the chart's rules name for pinned and waits for a change it may not make.
            "--plugin-strategy",
            self.spec.strategy,
            *self.extra_args,
        ]
        self.controller = c.sup.start("carve-controller", argv, env=env)
        self.wait_leading()

    def wait_leading(self, timeout_s: float = 90, renewed_since: float = 0.0) -> None:
        """Until the controller process is alive and holds the chart's leader Lease (renewed at or after
        `renewed_since`, a time.time(): a restarted process's own renewal, not its predecessor's)."""
        c = self.cluster
        coord = client.CoordinationV1Api(c.api())
        assert self.controller
        lease = (self.controller.env or {}).get("CARVE_LEASE_NAME", "carve-controller")

        def leading():
            assert self.controller
            if not self.controller.alive():
                raise StartError(f"carve controller exited:\n{tail(self.controller.log)}")
            with contextlib.suppress(client.ApiException):
                spec = coord.read_namespaced_lease(lease, NAMESPACE).spec
                renewed = spec.renew_time.timestamp() if spec.renew_time else 0.0
                return spec.holder_identity == "e2e-controller-0" and renewed >= renewed_since
            return False

        c._wait("carve controller's leader Lease", leading, timeout_s)

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.controller.log, lines) if self.controller else "(not started)"
