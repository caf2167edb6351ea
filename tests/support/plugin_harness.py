"""Test harness for the plugin process: a fake node in temp dirs, the plugin as a subprocess, a fake kubelet.

The fake kubelet is a plain gRPC client speaking the kubelet's wire protocol over the plugin's real unix
sockets (registration, DRA v1 and v1beta1). Claims live in a FileCluster directory that both the test and
the plugin process read; allocations are written by hand in the shape the scheduler writes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import grpc
from support.driverroot import LAYOUTS, build_driver_root, hook_dir

from api.grpc import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from driver import names
from driver.plugin.filecluster import FileCluster
from driver.plugin.state.checkpoint import Checkpoint, claim_to_json

REPO = Path(__file__).resolve().parents[2]
NODE = "node-a"
FAKE_GPUS = "fake:2xA100-80GB,1xT4"
FAKE_LIB_READY = (REPO / "native/build/fakes/libnvidia-ml.so.1").exists()


class FakeNode:
    """The directories of one node: cluster, plugin state, registry, CDI, driver root, limiter."""

    def __init__(self, root: Path, node_name: str = NODE):
        self.root = Path(root)
        self.node_name = node_name
        self.cluster_dir = self.root / "cluster"
        self.plugin_dir = self.root / "plugin"
        # --run-dir: the claims' directories. The plugin directory here, so that the tests that look at
        # <plugin-dir>/claims keep their paths; tests of a separate run directory set it.
        self.run_dir = self.plugin_dir
        self.registry_dir = self.root / "registry"
        self.cdi_dir = self.root / "cdi"
        self.driver_root = self.root / "driver"
        self.limiter_dir = self.root / "limiter"
        self.cluster = FileCluster(self.cluster_dir)
        # A RHEL-layout driver (tests/support/driverroot.py); regular files stand in for the device nodes.
        build_driver_root(self.driver_root, LAYOUTS["rhel"], self.root / ".stubs")
        (self.driver_root / "dev/nvidia2").touch()
        hook_dir(self.limiter_dir)  # carve-cdi-hook and carve-ldconfig, as the chart installs them
        (self.limiter_dir / names.LIMITER_LIBRARY).write_bytes(b"\0")

    def args(self, strategy: str, *extra: str) -> list[str]:
        return [
            "--node-name",
            self.node_name,
            "--gpus",
            FAKE_GPUS,
            "--strategy",
            strategy,
            "--cluster",
            f"file:{self.cluster_dir}",
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
            "--limiter-dir",
            str(self.limiter_dir),
            "--k8s-version",
            "1.36",
            *extra,
        ]

    # --- what is on the node ---------------------------------------------------------------------------

    def devices(self) -> list[dict]:
        return [
            d
            for s in self.cluster.list_resource_slices(names.DRIVER_NAME, self.node_name)
            for d in s["spec"].get("devices") or []
        ]

    def device(self, type_: str, **attrs) -> str:
        """Name of the first published device of a type (and attribute values)."""
        for d in self.devices():
            a = {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
            if a.get("type") == type_ and all(a.get(k) == v for k, v in attrs.items()):
                return d["name"]
        raise LookupError(f"no published device of type {type_} with {attrs}")

    def spec_files(self) -> list[str]:
        return sorted(p.name for p in self.cdi_dir.glob("*.json")) if self.cdi_dir.exists() else []

    def claim_dirs(self) -> list[str]:
        d = self.run_dir / "claims"
        return sorted(p.name for p in d.iterdir()) if d.exists() else []

    def checkpoint_claims(self) -> dict:
        """The checkpoint's claims as JSON (snapshot plus log), read without changing the files."""
        loaded = Checkpoint(self.plugin_dir / names.CHECKPOINT_FILE, "").load(move_aside=False)
        return {uid: claim_to_json(c) for uid, c in loaded.claims.items()}

    def mig_instances(self) -> list[dict]:
        """Live MIG instances of the fake GPUs, read by a separate process through the fake NVML."""
        env = dict(os.environ, CARVE_FAKE_STATE=str(self.plugin_dir / "fake-gpus.state"))
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "driver.cli",
                "inspect",
                "--gpus",
                FAKE_GPUS,
                "--node-name",
                self.node_name,
                "-o",
                "json",
            ],
            env=env,
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return [m for g in json.loads(out)["gpus"] for m in g["mig_instances"]]

    def leftovers(self) -> dict:
        return {
            "specs": self.spec_files(),
            "claim_dirs": self.claim_dirs(),
            "checkpoint": self.checkpoint_claims(),
        }

    # --- claims ----------------------------------------------------------------------------------------

    def put_claim(
        self,
        name: str,
        results: list[dict],
        configs: list[dict] = (),
        namespace: str = "default",
        uid: str | None = None,
    ) -> tuple[str, str, str]:
        obj = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
            "spec": {"devices": {"requests": [{"name": r["request"]} for r in results]}},
            "status": {"allocation": {"devices": {"results": results, "config": list(configs)}}},
        }
        stored = self.cluster.put_resource_claim(obj)
        return (namespace, name, stored["metadata"]["uid"])


def result(
    request: str,
    device: str,
    pool: str = NODE,
    share_id: str | None = None,
    consumed: dict | None = None,
    driver: str = names.DRIVER_NAME,
) -> dict:
    r = {"request": request, "driver": driver, "pool": pool, "device": device}
    if share_id:
        r["shareID"] = share_id
    if consumed:
        r["consumedCapacity"] = consumed
    return r


def slice_config(request: str | None = None, **params) -> dict:
    entry = {
        "source": "FromClaim",
        "opaque": {
            "driver": names.DRIVER_NAME,
            "parameters": {"apiVersion": names.CONFIG_API_VERSION, "kind": "SliceConfig", **params},
        },
    }
    if request:
        entry["requests"] = [request]
    return entry


class PluginProcess:
    def __init__(self, node: FakeNode, strategy: str, env: dict | None = None, extra: tuple = ()):
        self.node = node
        self.strategy = strategy
        self.env = dict(os.environ, **(env or {}))
        if "CARVE_FAULT" not in (env or {}):
            self.env.pop("CARVE_FAULT", None)
        self.env.pop(names.ENV_FAKE_STATE, None)
        self.extra = extra
        self.log_path = node.root / "plugin.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30.0) -> PluginProcess:
        reg = self.node.registry_dir / names.REGISTRATION_SOCKET
        if reg.exists():
            reg.unlink()  # a killed process leaves it; wait for the new one's
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "driver.cli", "plugin", *self.node.args(self.strategy, *self.extra)],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while not reg.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"plugin exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"plugin did not register within {timeout_s}s:\n{self.log()}")
            time.sleep(0.02)
        return self

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def wait_for_log(self, pattern: str, timeout_s: float = 10.0) -> re.Match:
        """The first match of a regex in the log, waiting for it: the registration socket appears before
        the process logs `plugin.started`, so a test must not read that line right after start()."""
        deadline = time.monotonic() + timeout_s
        while (found := re.search(pattern, self.log())) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not in the plugin log within {timeout_s}s:\n{self.log()}")
            time.sleep(0.02)
        return found

    def stop(self) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else 0

    def wait_exit(self, timeout_s: float = 10.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)


# The health services a 1.37 kubelet knows, newest first (pkg/kubelet/cm/dra/plugin/dra_plugin.go).
KUBELET_HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
_HEALTH = {
    "v1.DRAResourceHealth": (dra_health_v1_pb2, dra_health_v1_pb2_grpc),
    "v1alpha1.DRAResourceHealth": (dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc),
}


class HealthWatch:
    """The kubelet's NodeWatchResources stream: messages land in a queue as they arrive."""

    def __init__(self, sock: Path, service: str):
        self.service = service
        self.pb, grpc_mod = _HEALTH[service]
        self.channel = grpc.insecure_channel(f"unix://{sock}")
        stub = grpc_mod.DRAResourceHealthStub(self.channel)
        self.call = stub.NodeWatchResources(self.pb.NodeWatchResourcesRequest())
        self.messages: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for m in self.call:
                self.messages.put(m)
        except grpc.RpcError:
            pass

    def until(self, predicate, timeout_s: float = 20.0):
        """The first message (from now on) that satisfies `predicate`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                m = self.messages.get(timeout=0.5)
            except queue.Empty:
                continue
            if predicate(m):
                return m
        raise AssertionError(f"no matching {self.service} message within {timeout_s}s")

    def close(self) -> None:
        self.call.cancel()
        self.channel.close()


class Kubelet:
    """The kubelet's side of the sockets.

    `keep_connection`: the DRA calls share one channel for the Kubelet's lifetime, as the real kubelet keeps
    one gRPC connection per registered plugin (pkg/kubelet/cm/dra/plugin, getOrCreateGRPCConn); `close()`
    ends it. Without it each call dials anew, which tests of a restarted plugin rely on.
    """

    def __init__(self, node: FakeNode, keep_connection: bool = False):
        self.node = node
        self._kept: grpc.Channel | None = None
        self._kept_lock = threading.Lock()
        self.keep_connection = keep_connection

    def _channel(self, path: Path) -> grpc.Channel:
        return grpc.insecure_channel(f"unix://{path}")

    def _dra_channel(self):
        """A context manager yielding the channel of one DRA call."""
        if not self.keep_connection:
            return self._channel(self.node.plugin_dir / names.DRA_SOCKET)
        with self._kept_lock:
            if self._kept is None:
                self._kept = self._channel(self.node.plugin_dir / names.DRA_SOCKET)
        return contextlib.nullcontext(self._kept)

    def close(self) -> None:
        with self._kept_lock:
            if self._kept is not None:
                self._kept.close()
                self._kept = None

    def get_info(self):
        with self._channel(self.node.registry_dir / names.REGISTRATION_SOCKET) as ch:
            return pluginregistration_pb2_grpc.RegistrationStub(ch).GetInfo(
                pluginregistration_pb2.InfoRequest(), timeout=10
            )

    def watch_health(self, service: str | None = None) -> HealthWatch:
        """Open the health stream as a 1.37 kubelet does: the newest service the plugin's registration
        lists that the kubelet knows (or `service`, as a 1.34-1.36 kubelet calls v1alpha1)."""
        if service is None:
            offered = list(self.get_info().supported_versions)
            service = next((s for s in KUBELET_HEALTH_SERVICES if s in offered), "")
            assert service, f"the plugin advertises no health service: {offered}"
        return HealthWatch(self.node.plugin_dir / names.DRA_SOCKET, service)

    def notify(self, registered: bool, error: str = "") -> None:
        with self._channel(self.node.registry_dir / names.REGISTRATION_SOCKET) as ch:
            pluginregistration_pb2_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                pluginregistration_pb2.RegistrationStatus(plugin_registered=registered, error=error),
                timeout=10,
            )

    def _stub(self, version: str, ch):
        mods = {"v1": (dra_v1_pb2, dra_v1_pb2_grpc), "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)}
        pb, pb_grpc = mods[version]
        return pb, pb_grpc.DRAPluginStub(ch)

    def prepare(self, claims: list[tuple[str, str, str]], version: str = "v1", timeout: float = 30) -> dict:
        """uid -> {"error": str, "devices": [(request_names, pool, device, cdi_ids, share_id)]}"""
        with self._dra_channel() as ch:
            pb, stub = self._stub(version, ch)
            req = pb.NodePrepareResourcesRequest(
                claims=[pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]
            )
            resp = stub.NodePrepareResources(req, timeout=timeout)
        out = {}
        for uid, r in resp.claims.items():
            out[uid] = {
                "error": r.error,
                "devices": [
                    (
                        list(d.request_names),
                        d.pool_name,
                        d.device_name,
                        list(d.cdi_device_ids),
                        d.share_id if version == "v1" and d.HasField("share_id") else None,
                    )
                    for d in r.devices
                ],
            }
        return out

    def unprepare(self, claims: list[tuple[str, str, str]], version: str = "v1", timeout: float = 30) -> dict:
        with self._dra_channel() as ch:
            pb, stub = self._stub(version, ch)
            req = pb.NodeUnprepareResourcesRequest(
                claims=[pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]
            )
            resp = stub.NodeUnprepareResources(req, timeout=timeout)
        return {uid: r.error for uid, r in resp.claims.items()}
