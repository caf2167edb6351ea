"""The controller's admission webhooks (namespace budgets, HAMi conversion) on the local cluster.

`carve controller` runs as a host process with the env of the chart's controller container rendered with
`namespaceBudgets.enabled` and `hamiWebhook.enabled`, a token of the chart's controller ServiceAccount and
the chart's ClusterRole as rendered with those values (so the chart's RBAC is what it is held to), and
`--dry-run` (it plans and writes nothing: the session's nodes keep their strategies). It serves HTTPS with
a certificate of the cluster's CA. The chart's Validating/MutatingWebhookConfigurations are applied as
rendered, except for the client config: the chart names the Service in front of the controller pods, and
the local cluster has no kube-proxy, so each webhook gets `url: https://127.0.0.1:<port><the chart's
path>` and the cluster CA as caBundle (docs/quota.md, "On the e2e cluster"). The HAMi webhook is narrowed
to namespaces labelled HAMI_NAMESPACE_LABEL so the session's other tests never see it.
"""

from __future__ import annotations

import base64
import contextlib
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e.cluster import kubeconfig
from e2e.cluster.chart import NAMESPACE, RELEASE, render_chart
from e2e.cluster.launcher import Cluster
from e2e.cluster.procs import Proc, free_port, tail

CARVE = str(Path(sys.executable).parent / "carve")
CONTROLLER_SA = f"{RELEASE}-controller"
HAMI_NAMESPACE_LABEL = "carve.dev/e2e-hami"
_ESCAPED = HAMI_NAMESPACE_LABEL.replace(".", "\\.")  # helm --set splits keys on unescaped dots
SETS = (
    "namespaceBudgets.enabled=true",
    "hamiWebhook.enabled=true",
    f"hamiWebhook.namespaceSelector.matchLabels.{_ESCAPED}=on",
)
WEBHOOK_KINDS = {
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
}


def rendered(cluster: Cluster) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_chart(cluster.version, *SETS)) if d]


@dataclass
class ControllerWebhooks:
    cluster: Cluster
    proc: Proc | None = None
    port: int = 0
    metrics_port: int = 0
    applied: tuple[tuple[str, str], ...] = ()

    @property
    def root(self) -> Path:
        return self.cluster.root / "controller-webhooks"

    def start(self) -> ControllerWebhooks:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        c = self.cluster
        assert c.cp.ca
        self.root.mkdir(parents=True, exist_ok=True)
        objects = rendered(c)
        role = next(
            o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == CONTROLLER_SA
        )
        c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(role))
        token = (
            client.CoreV1Api(c.api())
            .create_namespaced_service_account_token(
                CONTROLLER_SA, NAMESPACE, {"spec": {"expirationSeconds": 4 * 3600}}
            )
            .status.token
        )
        kc = kubeconfig.write(self.root / "controller.kubeconfig", c.cp.server, c.cp.ca.path, token=token)
        serving = c.cp.ca.issue("controller-webhooks", "127.0.0.1", server=True)
        deployment = next(
            o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == CONTROLLER_SA
        )
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
        assert env.get("CARVE_BUDGET_WEBHOOK") == "true" and env.get("CARVE_HAMI_WEBHOOK") == "true", env
        self.port, self.metrics_port = free_port(), free_port()
        argv = [
            CARVE,
            *container["args"],
            "--kubeconfig",
            str(kc),
            "--no-leader-elect",
            "--dry-run",
            "--identity",
            "e2e-webhooks",
            # The chart's paths are inside the pod (the Secret's mount) and its port is the pod's: here the
            # cluster CA's certificate and a free port on the host.
            "--webhook-addr",
            f"127.0.0.1:{self.port}",
            "--webhook-cert",
            str(serving.cert),
            "--webhook-key",
            str(serving.key),
            "--metrics-addr",
            f"127.0.0.1:{self.metrics_port}",
        ]
        self.proc = c.sup.start("carve-controller-webhooks", argv, env=env)
        c.sup.wait(self.proc, "its /metrics", lambda: bool(self.metrics()), timeout_s=90)
        ca = base64.b64encode(c.cp.ca.path.read_bytes()).decode()
        applied = []
        for obj in objects:
            if obj["kind"] not in WEBHOOK_KINDS:
                continue
            for w in obj["webhooks"]:
                path = w["clientConfig"]["service"]["path"]
                w["clientConfig"] = {"url": f"https://127.0.0.1:{self.port}{path}", "caBundle": ca}
            c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(obj))
            applied.append((WEBHOOK_KINDS[obj["kind"]], obj["metadata"]["name"]))
        self.applied = tuple(applied)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self) -> None:
        for plural, name in self.applied:
            with contextlib.suppress(Exception):
                self.cluster.kubectl("delete", plural, name, "--ignore-not-found")
        if self.proc:
            self.proc.stop()
            with contextlib.suppress(ValueError):
                self.cluster.sup.procs.remove(self.proc)

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.proc.log, lines) if self.proc else "(not started)"
