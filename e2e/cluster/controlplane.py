"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler of one local cluster, each a child
process of the multi-call binary built by `make cluster` (docs/e2e.md lists every flag and why)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.cluster import certs, containerd, kubeconfig
from e2e.cluster.procs import Supervisor, free_port
from e2e.cluster.versions import Version

SERVICE_CIDR = "10.0.0.0/24"


@dataclass
class ControlPlane:
    version: Version
    root: Path
    sup: Supervisor
    server: str = ""
    ca: certs.CA | None = None
    admin: certs.Pair | None = None
    admin_kubeconfig: Path | None = None
    # Pods reach the API server (plugin mode daemonset: the chart's plugin pod uses its in-cluster config):
    # it listens on every address, and its serving certificate names every node bridge address, as the
    # nodes' bridges are picked after it starts (e2e/cluster/containerd.py).
    pod_reachable: bool = False

    def start(self) -> None:
        pki = self.root / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        self.ca = certs.CA(pki)
        ips = tuple(containerd.bridge_addresses()) if self.pod_reachable else ()
        serving = self.ca.issue("apiserver", "kube-apiserver", server=True, ips=ips)
        self.admin = self.ca.issue("admin", "e2e-admin", ("system:masters",))
        sa = certs.service_account_keys(pki)
        self._etcd_url = self._start_etcd()
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        self.admin_kubeconfig = kubeconfig.write(
            self.root / "admin.kubeconfig",
            self.server,
            self.ca.path,
            cert=self.admin.cert,
            key=self.admin.key,
        )
        self._start_apiserver(port, serving, sa)
        self._start_controller_manager(sa)
        self._start_scheduler()

    def _start_etcd(self) -> str:
        client, peer = free_port(), free_port()
        url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        proc = self.sup.start(
            "etcd",
            [
                self.version.binary,
                "etcd",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        import urllib.request

        self.sup.wait(
            proc, "etcd /health", lambda: b"true" in urllib.request.urlopen(url + "/health", timeout=2).read()
        )
        return url

    def _start_apiserver(self, port: int, serving: certs.Pair, sa: certs.Pair) -> None:
        assert self.ca and self.admin
        v = self.version
        proc = self.sup.start(
            "kube-apiserver",
            [
                v.binary,
                "apiserver",
                f"--etcd-servers={self._etcd_url}",
                f"--bind-address={'0.0.0.0' if self.pod_reachable else '127.0.0.1'}",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.ca.path}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                "--authorization-mode=Node,RBAC",
                # Added to the default set (which already holds ValidatingAdmissionPolicy, named to be sure).
                "--enable-admission-plugins=NodeRestriction,ValidatingAdmissionPolicy",
                "--allow-privileged=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                *([f"--runtime-config={v.runtime_config()}"] if v.runtime_config() else []),
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                # kubectl exec/logs reach the kubelets (x509 client auth against the same CA).
                f"--kubelet-client-certificate={self.admin.cert}",
                f"--kubelet-client-key={self.admin.key}",
                "--kubelet-preferred-address-types=InternalIP",  # node names do not resolve here
                *v.gates_flag(),
            ],
        )
        self.sup.wait(
            proc,
            "/readyz",
            lambda: (
                kubeconfig.get(self.server, self.ca.path, self.admin.cert, self.admin.key, "/readyz")[0]
                == 200
            ),
            timeout_s=180,
        )

    def _start_controller_manager(self, sa: certs.Pair) -> None:
        assert self.ca
        proc = self.sup.start(
            "kube-controller-manager",
            [
                self.version.binary,
                "controller-manager",
                f"--kubeconfig={self.admin_kubeconfig}",
                "--controllers=*",
                # The default 20 QPS makes releasing hundreds of claims (scale test) take minutes.
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={self.ca.path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                *self.version.gates_flag(),
            ],
        )
        self._kcm = proc

    def _start_scheduler(self) -> None:
        cfg = self.root / "scheduler.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(self.admin_kubeconfig), "qps": 200, "burst": 400},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        self.sup.start(
            "kube-scheduler",
            [
                self.version.binary,
                "scheduler",
                f"--config={cfg}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                *self.version.gates_flag(),
            ],
        )
