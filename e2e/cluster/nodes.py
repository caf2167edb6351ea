"""One node of the local cluster: a container runtime (containerd + runc, e2e/cluster/containerd.py, or a
fake CRI that records the CDI devices the kubelet passes), a real kubelet on it, and carve's plugin as a
host process authenticated with a token of the chart's ServiceAccount bound to the node's plugin pod (so
the chart's RBAC and admission policy apply)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from driver import names
from e2e.cluster import certs, kubeconfig
from e2e.cluster.containerd import RUNTIMES, Containerd
from e2e.cluster.images import Image
from e2e.cluster.procs import Proc, Supervisor, free_port
from e2e.cluster.versions import REPO, Version

PLUGIN_LABEL = "nvidia.com/gpu.present"
FAKE_DRIVER_VERSION = "580.95.05"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpus: str  # --gpus of carve plugin, e.g. "fake:2xA100-80GB,1xT4"
    strategy: str  # --strategy, e.g. "0=mig,1=soft,exclusive"


@dataclass
class Node:
    spec: NodeSpec
    root: Path
    version: Version
    sup: Supervisor
    kubelet: Proc | None = None
    cri: Proc | None = None
    plugin: Proc | None = None
    plugin_kubeconfig: Path | None = None
    extra_plugin_args: list[str] = field(default_factory=list)
    runtime: str = "fakecri"  # RUNTIMES: "containerd" runs real containers (e2e/cluster/containerd.py)
    index: int = 1  # the node's number in its cluster (the containerd runtime's bridge and subnet)
    containerd: Containerd | None = None
    # The kubelet's node labels, and a command line its argv is appended to (e2e/cluster/legacy.py runs
    # the legacy node's kubelet in a mount namespace of its own).
    labels: dict[str, str] = field(default_factory=lambda: {PLUGIN_LABEL: "true"})
    kubelet_wrapper: list[str] = field(default_factory=list)
    extra_images: tuple[Image, ...] = ()  # imported into the node's containerd (the carve image)
    # > 0: the plugin's state directory is a tmpfs of that many MiB, so a fault can fill it (e2e/soak); the
    # fake GPUs' own state then lives beside it, as a real driver's does not live on the plugin's disk.
    state_tmpfs_mib: int = 0
    # The host-process plugin's --metrics-addr port on 127.0.0.1 (picked at its first start, kept across
    # restarts so a scraper's target stays valid); e2e/test_monitoring.py scrapes it with Prometheus.
    metrics_port: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def node_ip(self) -> str:
        return self.containerd.node_ip if self.containerd else "127.0.0.1"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_dir / "plugins" / names.DRIVER_NAME

    @property
    def run_dir(self) -> Path:
        """The plugin's --run-dir (claims' directories): a tmpfs of its own, as /run is on a host, so the
        limits file's trust anchor (CARVE_LIMITS_SOURCE) is another mount than the plugin directory's."""
        return self.root / "run"

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_dir / "plugins_registry"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def cri_record(self) -> Path:
        return self.root / "cri-containers.jsonl"

    def start_kubelet(self, server: str, ca: certs.CA) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for d in (self.kubelet_dir, self.registry_dir, self.cdi_dir):
            d.mkdir(parents=True, exist_ok=True)
        sock = self._start_runtime()
        pair = ca.issue(f"kubelet-{self.name}", f"system:node:{self.name}", ("system:nodes",))
        self._start_kubelet(server, ca, sock, pair)

    def _start_runtime(self) -> Path:
        if self.runtime not in RUNTIMES:
            raise ValueError(
                f"node {self.name}: runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}"
            )
        if self.runtime == "fakecri":
            sock = self.root / "cri.sock"
            self._start_fakecri(sock)
            return sock
        self.containerd = Containerd(
            self.name,
            self.index,
            self.root / "containerd",
            self.cdi_dir,
            self.sup,
            extra_images=self.extra_images,
        )
        self.cri = self.containerd.start()
        return self.containerd.socket

    def _start_fakecri(self, sock: Path) -> None:
        self.cri = self.sup.start(
            f"{self.name}-fakecri",
            [
                self.version.binary,
                "fakecri",
                f"--socket={sock}",
                f"--record={self.cri_record}",
            ],
        )
        self.sup.wait(self.cri, "CRI socket", sock.exists, timeout_s=30)

    def _start_kubelet(self, server: str, ca: certs.CA, sock: Path, pair) -> None:
        kc = kubeconfig.write(self.root / "kubelet.kubeconfig", server, ca.path, cert=pair.cert, key=pair.key)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.node_ip,
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzPort": 0,
            "containerRuntimeEndpoint": f"unix://{sock}",
            # This sandbox: cgroup v1, no systemd, no swap accounting, other kubelets on the same host.
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "localStorageCapacityIsolation": False,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "hairpinMode": "none",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(ca.path)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "featureGates": self.version.feature_gates(),
            "syncFrequency": "10s",
            "maxPods": 250,
            **self.version.kubelet_extra(self.root / "pod-logs"),
        }
        cfg = self.root / "kubelet.yaml"
        cfg.write_text(yaml.safe_dump(config))
        self.kubelet = self.sup.start(
            f"{self.name}-kubelet",
            [
                *self.kubelet_wrapper,
                self.version.binary,
                "kubelet",
                f"--config={cfg}",
                f"--kubeconfig={kc}",
                f"--root-dir={self.kubelet_dir}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.node_ip}",
                "--node-labels=" + ",".join(f"{k}={v}" for k, v in self.labels.items()),
            ],
        )

    @property
    def driver_root(self) -> Path:
        return self.root / "driver-root"

    def make_driver_root(self, gpus: int = 8) -> None:
        """The node's NVIDIA driver root as the plugin scans it: device nodes (real character devices with
        the driver's numbers, nothing behind them) and the fake driver libraries of native/fakes."""
        dev = self.driver_root / "dev"
        dev.mkdir(parents=True, exist_ok=True)
        nodes = {f"nvidia{i}": (195, i) for i in range(gpus)}
        nodes |= {"nvidiactl": (195, 255), "nvidia-uvm": (510, 0), "nvidia-uvm-tools": (510, 1)}
        for name, (major, minor) in nodes.items():
            if not (dev / name).exists():
                os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        # Installed as a driver installs them: lib<name>.so.<version>, and the .so.1 soname link.
        lib = self.driver_root / "usr" / "lib64"
        lib.mkdir(parents=True, exist_ok=True)
        for name in ("libcuda.so", "libnvidia-ml.so"):
            versioned = lib / f"{name}.{FAKE_DRIVER_VERSION}"
            shutil.copy2(REPO / "native" / "build" / "fakes" / f"{name}.1", versioned)
            if not (lib / f"{name}.1").is_symlink():
                (lib / f"{name}.1").symlink_to(versioned.name)

    def plugin_argv(self) -> list[str]:
        assert self.plugin_kubeconfig
        return [
            str(Path(sys.executable).parent / "carve"),
            "plugin",
            "--node-name",
            self.name,
            "--gpus",
            self.spec.gpus,
            "--strategy",
            self.spec.strategy,
            "--cluster",
            "kube",
            "--kubeconfig",
            str(self.plugin_kubeconfig),
            "--plugin-dir",
            str(self.plugin_dir),
            "--run-dir",
            str(self.run_dir),
            "--registry-dir",
            str(self.registry_dir),
            "--cdi-dir",
            str(self.cdi_dir),
            "--driver-root",
            str(self.driver_root),
            # The chart's init container copies the limiter to the host; here it is the build output.
            "--limiter-dir",
            str(REPO / "native" / "build"),
            "--publish-interval",
            "5",
            # e2e/test_health.py waits for a GPU to recover: not the default 5 minutes.
            "--health-recovery-seconds",
            "20",
            "--metrics-addr",
            f"127.0.0.1:{self.metrics_port}",
            *self.extra_plugin_args,
        ]

    @property
    def xid_file(self) -> Path:
        """Append `<gpu index> <xid>` lines to raise XIDs on this node's fake GPUs (e2e/test_health.py)."""
        return self.root / "fake-xid"

    @property
    def lost_file(self) -> Path:
        """GPU indexes listed here are lost (fallen off the bus) for this node's fake NVML."""
        return self.root / "fake-lost"

    @property
    def fake_state(self) -> Path:
        """The fake GPUs' persistent state (MIG instances): CARVE_FAKE_STATE of the plugin and its probes."""
        return (self.root if self.state_tmpfs_mib else self.plugin_dir) / "fake-gpus.state"

    def plugin_env(self) -> dict[str, str]:
        self.xid_file.touch()
        env = {"CARVE_FAKE_XID_FILE": str(self.xid_file), "CARVE_FAKE_LOST_FILE": str(self.lost_file)}
        if self.state_tmpfs_mib:
            env |= {
                names.ENV_FAKE_STATE: str(self.fake_state),
                names.ENV_FAKE_PROC_ROOT: str(self.root / "fake-proc"),
            }
        return env

    def mount_state_tmpfs(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount(self.plugin_dir):
            opts = f"size={self.state_tmpfs_mib}m,mode=0750"
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", opts, "carve-state", str(self.plugin_dir)], check=True
            )

    def mount_run_tmpfs(self) -> None:
        """The node's run directory as a tmpfs, shared: a containerized plugin's region tmpfs mounts under
        it (mountPropagation: Bidirectional) reach the host, as under a host's /run."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount(self.run_dir):
            opts = "size=64m,mode=0755"
            subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "carve-run", str(self.run_dir)], check=True)
            subprocess.run(["mount", "--make-shared", str(self.run_dir)], check=True)

    def start_plugin(self, server: str, ca: Path, token: str) -> Proc:
        self.plugin_kubeconfig = kubeconfig.write(self.root / "plugin.kubeconfig", server, ca, token=token)
        self.make_driver_root()
        self.mount_run_tmpfs()
        if self.state_tmpfs_mib:
            self.mount_state_tmpfs()
        self.metrics_port = self.metrics_port or free_port()
        self.plugin = self.sup.start(f"{self.name}-plugin", self.plugin_argv(), self.plugin_env())
        return self.plugin

    def restart_plugin(self, kill: bool = True) -> Proc:
        """Crash (SIGKILL) or stop the plugin and start it again with the same flags and state."""
        assert self.plugin
        self.plugin.kill() if kill else self.plugin.stop()
        self.sup.procs.remove(self.plugin)
        self.plugin = self.sup.start(f"{self.name}-plugin", self.plugin_argv(), self.plugin_env())
        return self.plugin

    def cdi_specs(self) -> dict[str, dict]:
        return {p.name: json.loads(p.read_text()) for p in sorted(self.cdi_dir.glob("*.json"))}

    def created_containers(self) -> list[dict]:
        if self.containerd:
            return self.containerd.created_containers()
        if not self.cri_record.exists():
            return []
        return [json.loads(line) for line in self.cri_record.read_text().splitlines() if line.strip()]
