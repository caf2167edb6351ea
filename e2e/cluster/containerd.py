"""A real container runtime per node: containerd 2.x (built from its Go module into .tools/containerd/)
with Debian's runc, its CRI plugin reading CDI specs from the node's CDI directory, CNI's bridge plugin
(Debian's containernetworking-plugins) on a bridge of the node's own, and the locally built images of
e2e/cluster/images.py imported with `ctr`.

Every node has its own root, state, socket, stream-server port, CNI network and bridge, so several
containerds run side by side on one host. NRI is off (its socket is host-global).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import images
from e2e.cluster.procs import Proc, StartError, Supervisor, free_port
from e2e.cluster.versions import REPO

CONTAINERD_VERSION = "v2.2.9"
BIN_DIR = REPO / ".tools" / "containerd" / CONTAINERD_VERSION / "bin"
CNI_BIN_DIR = Path("/usr/lib/cni")
RUNC = "runc"
# The node runtimes of the launcher's --runtime: real containers, or upstream's fake CRI server that only
# records what the kubelet asks for (for machines where containerd cannot run).
RUNTIMES = ("containerd", "fakecri")


def bridge_address(index: int) -> str:
    return f"10.231.{index}.1"


def bridge_addresses() -> list[str]:
    """Every address a node's bridge can get (`Containerd._make_bridge` takes the first free index)."""
    return [bridge_address(i) for i in range(1, 255)]


def missing() -> list[str]:
    """What this machine lacks for the containerd runtime (empty: it can run)."""
    lacks = [f"{BIN_DIR / b} (make containerd)" for b in ("containerd", "ctr", "containerd-shim-runc-v2")]
    lacks = [m for m in lacks if not Path(m.split()[0]).exists()]
    if not shutil.which(RUNC):
        lacks.append("runc (apt-get install runc)")
    if not (CNI_BIN_DIR / "bridge").exists():
        lacks.append(f"{CNI_BIN_DIR}/bridge (apt-get install containernetworking-plugins)")
    return lacks


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))


def toml_dump(tables: dict[str, dict]) -> str:
    """The small TOML subset containerd's config needs: tables of scalars and lists, dotted table names."""
    out = []
    for table, values in tables.items():
        out.append(f"[{table}]" if table else "")
        out += [f"{k} = {_toml(v)}" for k, v in values.items()]
        out.append("")
    return "\n".join(out)


@dataclass
class Containerd:
    """One node's containerd: `start` runs it and imports the images; `socket` is the kubelet's endpoint."""

    name: str  # the node's name
    index: int  # the node's number in the cluster: its bridge and subnet
    root: Path  # <node>/containerd
    cdi_dir: Path
    sup: Supervisor
    proc: Proc | None = None
    extra_images: tuple[images.Image, ...] = ()  # imported after the base images (the carve image)

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def bridge(self) -> str:
        return f"carve-e2e{self.index}"

    @property
    def node_ip(self) -> str:
        """The node's address, on its bridge: the kubelet refuses a loopback node IP (its status then has
        no addresses and the API server cannot reach it for exec and logs)."""
        return bridge_address(self.index)

    def _make_bridge(self) -> None:
        """Claim the first free bridge from the node's index on (`ip link add` fails on an existing name,
        so two clusters on one host never share a bridge or a subnet), with the node's IP on it."""
        while True:
            argv = ["ip", "link", "add", self.bridge, "type", "bridge"]
            p = subprocess.run(argv, capture_output=True, text=True)
            if p.returncode == 0:
                break
            if "exists" not in p.stderr or self.index >= 254:
                raise StartError(f"{self.name}: ip link add {self.bridge} type bridge: {p.stderr.strip()}")
            self.index += 1
        _ip("addr", "add", f"{self.node_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def config(self) -> str:
        cri = "plugins.'io.containerd.cri.v1.runtime'"
        return toml_dump(
            {
                "": {
                    "version": 3,
                    "root": str(self.root / "root"),
                    "state": str(self.root / "state"),
                    "disabled_plugins": ["io.containerd.nri.v1.nri"],
                },
                "grpc": {"address": str(self.socket)},
                "ttrpc": {"address": str(self.root / "containerd.sock.ttrpc")},
                "plugins.'io.containerd.grpc.v1.cri'": {
                    "stream_server_address": "127.0.0.1",
                    "stream_server_port": str(free_port()),
                },
                cri: {
                    # CDI is on by default in 2.x; the spec dirs are the node's, where its plugin writes.
                    "enable_cdi": True,
                    "cdi_spec_dirs": [str(self.cdi_dir)],
                    "netns_mounts_under_state_dir": True,
                    "disable_apparmor": True,
                    # The sandbox (pause) gets oom_score_adj -998, which this host refuses (EACCES in runc).
                    "restrict_oom_score_adj": True,
                },
                f"{cri}.cni": {
                    "bin_dirs": [str(CNI_BIN_DIR)],
                    "conf_dir": str(self.root / "cni"),
                    "max_conf_num": 1,
                },
                f"{cri}.containerd": {"default_runtime_name": "runc"},
                f"{cri}.containerd.runtimes.runc": {"runtime_type": "io.containerd.runc.v2"},
                f"{cri}.containerd.runtimes.runc.options": {
                    "BinaryName": shutil.which(RUNC) or RUNC,
                    "SystemdCgroup": False,
                },
                "plugins.'io.containerd.cri.v1.images'.pinned_images": {"sandbox": images.PAUSE},
            }
        )

    def cni_config(self) -> dict:
        return {
            "cniVersion": "1.0.0",
            "name": f"carve-{self.name}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": False,  # no route out, and no host-wide ip_forward change
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [
                            [{"subnet": f"10.231.{self.index}.0/24", "rangeStart": f"10.231.{self.index}.10"}]
                        ],
                        "dataDir": str(self.root / "ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        }

    def start(self, timeout_s: float = 60.0) -> Proc:
        lacks = missing()
        if lacks:
            raise StartError(
                f"{self.name}: the containerd runtime cannot run here, missing: {', '.join(lacks)}"
            )
        for d in ("root", "state", "cni", "ipam"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        self._make_bridge()
        (self.root / "cni" / "10-carve.conflist").write_text(json.dumps(self.cni_config(), indent=1))
        cfg = self.root / "config.toml"
        cfg.write_text(self.config())
        env = {"PATH": f"{BIN_DIR}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}
        self.proc = self.sup.start(
            f"{self.name}-containerd",
            [BIN_DIR / "containerd", "--config", cfg, "--log-level", "info"],
            env=env,
        )
        self.sup.wait(self.proc, "containerd socket", self.socket.exists, timeout_s=timeout_s)
        for image in (*images.build_all(), *self.extra_images):
            self.ctr("images", "import", str(image.tarball))
        return self.proc

    def ctr(self, *args: str, namespace: str = "k8s.io") -> str:
        argv = [str(BIN_DIR / "ctr"), "--address", str(self.socket), "-n", namespace, *args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise StartError(f"{self.name}: {' '.join(argv)} exited {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    def created_containers(self) -> list[dict]:
        """The containers the kubelet created, as the fake CRI records them: pod, namespace, name, and the
        CDI devices and annotations from the CRI request that containerd keeps in its container metadata."""
        listing = self.ctr("containers", "list", "--quiet").split()
        out = []
        for cid in listing:
            try:
                info = json.loads(self.ctr("containers", "info", cid))
            except (StartError, ValueError):
                continue  # gone between list and info
            labels = info.get("Labels") or {}
            if labels.get("io.cri-containerd.kind") != "container":
                continue
            config = _cri_metadata(info).get("Config") or {}
            out.append(
                {
                    "id": cid,
                    "namespace": labels.get("io.kubernetes.pod.namespace"),
                    "pod": labels.get("io.kubernetes.pod.name"),
                    "name": labels.get("io.kubernetes.container.name"),
                    "cdiDevices": [d.get("name") for d in config.get("CDI_devices") or []],
                    # The CRI request's container annotations (a device plugin's land here; containerd
                    # resolves cdi.k8s.io/* ones from them and copies none into the OCI spec).
                    "annotations": config.get("annotations") or {},
                    "spec": info.get("Spec") or {},
                }
            )
        return out

    def kill_all(self) -> None:
        """Kill and delete every task: runc's shims are daemons of their own (not in containerd's process
        group) and would outlive the cluster; a shim exits when its last task is deleted."""
        if not (self.proc and self.proc.alive()):
            return
        try:
            tasks = self.ctr("tasks", "list", "--quiet").split()
        except (StartError, subprocess.TimeoutExpired):
            return
        for tid in tasks:
            for args in (
                ("tasks", "kill", "--all", "--signal", "SIGKILL", tid),
                ("tasks", "delete", "--force", tid),
            ):
                with contextlib.suppress(StartError, subprocess.TimeoutExpired):
                    self.ctr(*args)

    def kill_shims(self) -> None:
        """SIGKILL, by pid, this containerd's shims that outlived their tasks (after containerd stops)."""
        for pid in _shims_of(self.socket):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop_network(self) -> None:
        """The node's bridge outlives containerd; remove it so the next cluster starts clean."""
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)


def _shims_of(socket: Path) -> list[int]:
    """The runc shims started by the containerd listening on `socket` (their command line names it)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            pids.append(int(proc.name))
    return pids


def _ip(*args: str) -> None:
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise StartError(f"ip {' '.join(args)}: {p.stderr.strip()}")


def _cri_metadata(info: dict) -> dict:
    """The CRI plugin's metadata extension of a container (`ctr containers info`): a JSON document in a
    typeurl Any, which ctr prints base64-encoded."""
    ext = (info.get("Extensions") or {}).get("io.cri-containerd.container.metadata") or {}
    raw = ext.get("value")
    if not raw:
        return {}
    try:
        doc = json.loads(base64.b64decode(raw))
    except ValueError:
        return {}
    return doc.get("Metadata") or doc
