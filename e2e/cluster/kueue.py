"""Kueue beside the local cluster (docs/kueue.md): its manager, built by `make kueue` from the version that
e2e/kueue/go.mod pins, runs as a host process against the e2e API server with the cluster's admin kubeconfig.

What it needs, and how each is met here:
- its CRDs: the module's config/components/crd/bases, applied as they are. They serve v1beta1 and v1beta2
  (storage v1beta2) with the conversion webhook that kustomize patches in left out: everything here speaks
  v1beta2, so no conversion is ever asked for.
- its webhooks: served by the manager on 127.0.0.1 with a serving certificate of the cluster's CA, and
  registered with `url` client configs (the API server is a host process too, there is no Service). Only
  the webhooks of batch/v1 Jobs and of Kueue's own kinds are registered: the others (Pods, Deployments,
  frameworks not installed) would put every pod of the cluster behind Kueue's webhook.
- certificates: internal cert management is off (it writes a Secret and names a Service). Kueue v0.17.0
  then reads the metrics server's certificate from the fixed path /etc/kueue/metrics/certs
  (cmd/kueue/main.go), so the manager runs in a mount namespace of its own where a directory of this
  cluster is bind-mounted there.
- DRA: the feature gate DynamicResourceAllocation and `resources.deviceClassMappings` (carve's DeviceClasses
  to the logical resources a ClusterQueue's quota names)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from e2e.cluster.procs import Proc, StartError, Supervisor, free_port
from e2e.cluster.versions import REPO

GO_MOD = REPO / "e2e" / "kueue" / "go.mod"
NAMESPACE = "kueue-system"
# Webhooks are registered for these API groups only (see the module docstring).
WEBHOOK_GROUPS = frozenset({"batch", "kueue.x-k8s.io"})
WEBHOOK_CONFIGS = ("carve-e2e-kueue-mutating", "carve-e2e-kueue-validating")


def version() -> str:
    """The Kueue version e2e/kueue/go.mod requires (the one `make kueue` builds)."""
    m = re.search(r"^\s*sigs\.k8s\.io/kueue (v\S+)", GO_MOD.read_text(), re.M)
    if not m:
        raise StartError(f"{GO_MOD}: no requirement on sigs.k8s.io/kueue")
    return m.group(1)


def binary() -> Path:
    return REPO / ".tools" / "kueue" / version() / "kueue"


def module_dir() -> Path:
    """The Kueue module's source in the Go module cache (its CRDs and webhook manifests), which `make kueue`
    downloaded."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/kueue@{version()}"],
        cwd=GO_MOD.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    m = re.search(r'"Dir": "([^"]+)"', done.stdout)
    if done.returncode != 0 or not m:
        raise StartError(
            f"go mod download sigs.k8s.io/kueue@{version()}: {done.stderr.strip() or done.stdout}"
        )
    return Path(m.group(1))


def webhooks(manifests: str, base_url: str, ca_bundle: str) -> list[dict]:
    """Kueue's webhook configurations (config/components/webhook/manifests.yaml) narrowed to
    WEBHOOK_GROUPS, each pointing at `base_url` + its path and trusting `ca_bundle` (base64 PEM)."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups or not groups <= WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            kept.append({**hook, "clientConfig": {"url": base_url + path, "caBundle": ca_bundle}})
        name = WEBHOOK_CONFIGS[0] if doc["kind"] == "MutatingWebhookConfiguration" else WEBHOOK_CONFIGS[1]
        out.append({**doc, "metadata": {"name": name}, "webhooks": kept})
    return out


def configuration(
    webhook_port: int, cert_dir: Path, health_port: int, metrics_port: int, mappings: dict[str, list[str]]
) -> dict:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a host process: no leader election, no
    internal cert management, batch/v1 Jobs only, and the DRA device class mappings."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        "resources": {
            "deviceClassMappings": [
                {"name": name, "deviceClassNames": classes} for name, classes in mappings.items()
            ]
        },
    }


@dataclass
class Kueue:
    """Kueue's manager for one cluster (e2e/cluster/launcher.py's Cluster): start() applies the CRDs,
    starts the manager, registers its webhooks and waits until it serves them; stop() undoes all of it."""

    cluster: object  # e2e.cluster.launcher.Cluster (not imported: the launcher does not need Kueue)
    root: Path
    mappings: dict[str, list[str]]
    feature_gates: str = "DynamicResourceAllocation=true,VisibilityOnDemand=false"
    sup: Supervisor = field(init=False)
    proc: Proc | None = None

    def __post_init__(self) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self.sup = Supervisor(self.root / "logs")

    def start(self) -> Kueue:
        if not binary().exists():
            raise StartError(f"{binary()} is not built: run `make kueue`")
        if shutil.which("unshare") is None:
            raise StartError("unshare (util-linux) is missing: Kueue's metrics certificate path needs it")
        cluster = self.cluster
        src = module_dir()
        crds = sorted((src / "config" / "components" / "crd" / "bases").glob("*.yaml"))
        # Server-side: the Workload CRD is larger than client-side apply's last-applied annotation allows.
        cluster.kubectl("apply", "--server-side", *(a for c in crds for a in ("-f", str(c))))
        plural = [c.name.removeprefix("kueue.x-k8s.io_").removesuffix(".yaml") for c in crds]
        cluster.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            *(f"crd/{p}.kueue.x-k8s.io" for p in plural),
        )
        cluster.kubectl("create", "namespace", NAMESPACE)

        certs = self.root / "certs"
        certs.mkdir(exist_ok=True)
        pair = cluster.cp.ca.issue("kueue-webhook", "kueue-webhook", server=True)
        for d in (certs / "webhook", certs / "metrics"):
            d.mkdir(exist_ok=True)
            shutil.copy(pair.cert, d / "tls.crt")
            shutil.copy(pair.key, d / "tls.key")
        port, health = free_port(), free_port()
        cfg = self.root / "config.yaml"
        cfg.write_text(
            yaml.safe_dump(configuration(port, certs / "webhook", health, free_port(), self.mappings))
        )
        shutil.copytree(certs / "metrics", self.root / "etc" / "metrics" / "certs", dirs_exist_ok=True)
        # A private mount namespace: /etc/kueue/metrics/certs (fixed in Kueue) is this cluster's directory.
        script = 'mkdir -p /etc/kueue && mount --bind "$1" /etc/kueue && shift && exec "$@"'
        self.proc = self.sup.start(
            "kueue",
            [
                *("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"),
                str(self.root / "etc"),
                str(binary()),
                f"--config={cfg}",
                f"--feature-gates={self.feature_gates}",
                "--zap-log-level=2",
            ],
            env={"KUBECONFIG": str(cluster.kubeconfig)},
        )

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as r:
                return r.status == 200

        self.sup.wait(self.proc, "readyz", ready, timeout_s=120)
        ca = base64.b64encode(cluster.cp.ca.path.read_bytes()).decode()
        manifests = (src / "config" / "components" / "webhook" / "manifests.yaml").read_text()
        docs = webhooks(manifests, f"https://127.0.0.1:{port}", ca)
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        return self

    def stop(self) -> None:
        # The webhooks first: with the manager gone, failurePolicy Fail would refuse every Job.
        self.cluster.kubectl(
            "delete", "--ignore-not-found", "mutatingwebhookconfiguration", WEBHOOK_CONFIGS[0], check=False
        )
        self.cluster.kubectl(
            "delete", "--ignore-not-found", "validatingwebhookconfiguration", WEBHOOK_CONFIGS[1], check=False
        )
        self.sup.stop_all()
