"""A fake kubelet device manager for the legacy device plugin: the kubelet's side of the wire, in-process.

What it does, in the kubelet's order (docs/legacy.md and shared legacy facts):
- serves `v1beta1.Registration` on <dir>/kubelet.sock; Register dials the plugin's socket at once and reads
  GetDevicePluginOptions (what the current kubelet stores), then follows ListAndWatch in a thread;
- admits pods: per container (init containers first) picks device IDs itself from healthy, unallocated ones
  (at random, as nothing obliges the kubelet to pick in order), calls Allocate with those IDs only, and
  records container -> IDs + the response (its checkpoint);
- serves PodResources v1 List from those records;
- starts a container: PreStartContainer when the plugin asked for it, then does what the container
  runtime does with the response: resolves every CDI device in the CDI directory and checks that each mount
  source and device node it names exists (a runtime refuses the container otherwise);
- restarts (sockets deleted, fresh kubelet.sock, records kept) and reboots (also /var/run/cdi wiped).
"""

from __future__ import annotations

import json
import random
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from api.grpc import deviceplugin_v1beta1_pb2 as pb
from api.grpc import deviceplugin_v1beta1_pb2_grpc as pbgrpc
from api.grpc import podresources_v1_pb2 as prpb
from api.grpc import podresources_v1_pb2_grpc as prgrpc


class AdmissionError(Exception):
    """The pod failed admission (UnexpectedAdmissionError in a real kubelet)."""


class StartError(Exception):
    """The container could not be created (PreStartContainer failed, or the runtime could not apply it)."""


@dataclass
class Container:
    name: str
    ids: list[str]
    response: pb.ContainerAllocateResponse
    init: bool = False
    pod_uid: str = ""


@dataclass
class Started:
    env: dict[str, str]
    mounts: list[dict]
    device_nodes: list[dict]
    hooks: list[dict] = field(default_factory=list)


@dataclass
class _Plugin:
    resource: str
    endpoint: Path
    options: pb.DevicePluginOptions
    devices: dict[str, str] = field(default_factory=dict)  # id -> health
    updates: int = 0
    channel: grpc.Channel | None = None


class _Registration(pbgrpc.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def Register(self, request, context):
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        if "/" not in request.resource_name or request.resource_name.startswith("kubernetes.io/"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid resource name {request.resource_name}")
        try:
            self.kubelet._connect(request.resource_name, request.endpoint)
        except grpc.RpcError as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot reach the plugin: {e.details()}")
        return pb.Empty()


class _PodResources(prgrpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request, context):
        out = prpb.ListPodResourcesResponse()
        with self.kubelet.lock:
            for (ns, name), containers in self.kubelet.pods.items():
                pod = out.pod_resources.add(name=name, namespace=ns)
                for c in containers:
                    pod.containers.add(
                        name=c.name,
                        devices=[
                            prpb.ContainerDevices(resource_name=self.kubelet.resource, device_ids=c.ids)
                        ],
                    )
        return out


class FakeKubelet:
    def __init__(
        self, device_plugin_dir: Path, pod_resources_socket: Path, cdi_dir: Path, seed: int = 0
    ) -> None:
        self.dir = Path(device_plugin_dir)
        self.pod_resources_socket = Path(pod_resources_socket)
        self.cdi_dir = Path(cdi_dir)
        self.resource = "nvidia.com/gpu"
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.plugin: _Plugin | None = None
        self.pods: dict[tuple[str, str], list[Container]] = {}  # the checkpoint: survives restarts
        self.registrations = 0
        self.calls: list[str] = []
        self.rng = random.Random(seed)
        self._servers: list[grpc.Server] = []

    # --- lifecycle ---

    def start(self) -> FakeKubelet:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        reg = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pbgrpc.add_RegistrationServicer_to_server(_Registration(self), reg)
        reg.add_insecure_port(f"unix://{self.dir / 'kubelet.sock'}")
        pr = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        prgrpc.add_PodResourcesListerServicer_to_server(_PodResources(self), pr)
        pr.add_insecure_port(f"unix://{self.pod_resources_socket}")
        reg.start()
        pr.start()
        self._servers = [reg, pr]
        return self

    def stop(self) -> None:
        for s in self._servers:
            s.stop(0).wait()
        self._servers = []
        with self.lock:
            if self.plugin and self.plugin.channel:
                self.plugin.channel.close()
            self.plugin = None
        for p in (self.dir / "kubelet.sock", self.pod_resources_socket):
            p.unlink(missing_ok=True)

    def restart(self) -> None:
        """Kubelet restart: forget the plugin, delete the directory's sockets, serve a new kubelet.sock."""
        self.stop()
        for p in self.dir.iterdir():
            if p.name != "kubelet_internal_checkpoint":
                p.unlink()
        self.start()

    def reboot(self) -> None:
        """Node reboot: as restart, and /var/run (the CDI directory) is a fresh tmpfs."""
        if self.cdi_dir.exists():
            for p in self.cdi_dir.iterdir():
                p.unlink()
        self.restart()

    # --- plugin side ---

    def _connect(self, resource: str, endpoint: str) -> None:
        channel = grpc.insecure_channel(f"unix://{self.dir / endpoint}")
        stub = pbgrpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
        plugin = _Plugin(resource, self.dir / endpoint, options, channel=channel)
        with self.lock:
            if self.plugin and self.plugin.channel:
                self.plugin.channel.close()  # the kubelet keeps the newest plugin
            self.plugin = plugin
            self.registrations += 1
        threading.Thread(target=self._watch, args=(plugin, stub), daemon=True).start()

    def _watch(self, plugin: _Plugin, stub) -> None:
        try:
            for msg in stub.ListAndWatch(pb.Empty()):
                with self.changed:
                    plugin.devices = {d.ID: d.health for d in msg.devices}
                    plugin.updates += 1
                    self.changed.notify_all()
        except grpc.RpcError:
            with self.changed:  # the plugin went away: all its devices are unhealthy
                plugin.devices = {i: "Unhealthy" for i in plugin.devices}
                self.changed.notify_all()

    def wait_for(self, predicate, timeout: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self), timeout=timeout)

    def healthy_ids(self) -> list[str]:
        with self.lock:
            return sorted(
                i for i, h in (self.plugin.devices if self.plugin else {}).items() if h == "Healthy"
            )

    def _stub(self):
        with self.lock:
            if self.plugin is None:
                raise AdmissionError("no device plugin registered for nvidia.com/gpu")
            return pbgrpc.DevicePluginStub(self.plugin.channel), self.plugin.options

    # --- pods ---

    def admit(
        self, namespace: str, name: str, containers: list[tuple[str, int, bool]], uid: str = ""
    ) -> None:
        """Allocate for each (container, count, init) in order; AdmissionError like a failed admission.
        Each allocation is recorded in `kubelet_internal_checkpoint` (pod UID, container, resource, device
        IDs per NUMA node) as the kubelet's device manager writes it when Allocate returns."""
        stub, _options = self._stub()
        done: list[Container] = []
        with self.lock:  # the kubelet admits one pod at a time
            held = {i for cs in self.pods.values() for c in cs for i in c.ids}
            for cname, count, init in sorted(containers, key=lambda c: not c[2]):
                free = [i for i in self.healthy_ids() if i not in held]
                if len(free) < count:
                    raise AdmissionError(f"{namespace}/{name}: insufficient nvidia.com/gpu")
                ids = self.rng.sample(free, count)
                try:
                    resp = stub.Allocate(
                        pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)]),
                        timeout=10,
                    )
                except grpc.RpcError as e:
                    raise AdmissionError(
                        f"Allocate failed due to {e.details()}, which is unexpected"
                    ) from None
                self.calls.append(f"Allocate {namespace}/{name}/{cname}")
                held |= set(ids)
                done.append(Container(cname, ids, resp.container_responses[0], init, uid))
            self.pods[(namespace, name)] = done
            self._write_checkpoint()

    def remove(self, namespace: str, name: str) -> None:
        with self.lock:
            self.pods.pop((namespace, name), None)
            self._write_checkpoint()

    def _write_checkpoint(self) -> None:
        entries = [
            {
                "PodUID": c.pod_uid,
                "ContainerName": c.name,
                "ResourceName": self.resource,
                "DeviceIDs": {"-1": list(c.ids)},
                "AllocResp": "",
            }
            for cs in self.pods.values()
            for c in cs
        ]
        data = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 0}
        tmp = self.dir / ".kubelet_internal_checkpoint.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(self.dir / "kubelet_internal_checkpoint")

    def container(self, namespace: str, name: str, cname: str) -> Container:
        with self.lock:
            return next(c for c in self.pods[(namespace, name)] if c.name == cname)

    def start_container(self, namespace: str, name: str, cname: str) -> Started:
        c = self.container(namespace, name, cname)
        stub, options = self._stub()
        if options.pre_start_required:
            try:
                stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=c.ids), timeout=30)
            except grpc.RpcError as e:
                raise StartError(f"PreStartContainer: {e.details()}") from None
            self.calls.append(f"PreStartContainer {namespace}/{name}/{cname}")
        return self.runtime_apply(c.response)

    def runtime_apply(self, resp: pb.ContainerAllocateResponse) -> Started:
        env = dict(resp.envs)
        mounts = [{"hostPath": m.host_path, "containerPath": m.container_path} for m in resp.mounts]
        nodes = [{"path": d.container_path, "hostPath": d.host_path} for d in resp.devices]
        hooks: list[dict] = []
        wanted = [d.name for d in resp.cdi_devices]
        for key, value in resp.annotations.items():
            if key.startswith("cdi.k8s.io/"):
                wanted += value.split(",")
        seen_specs: set[str] = set()
        for device in wanted:
            spec_file, edits = self._cdi_edits(device)
            own = edits["own"]
            # A spec's common edits apply once however many of its devices the container gets.
            common = edits["common"] if spec_file not in seen_specs else {}
            seen_specs.add(spec_file)
            for part in (common, own):
                env.update(e.split("=", 1) for e in part.get("env", []))
                mounts += part.get("mounts", [])
                nodes += part.get("deviceNodes", [])
                hooks += part.get("hooks", [])
        for m in mounts:
            if not Path(m["hostPath"]).exists():
                raise StartError(f"mount source {m['hostPath']} does not exist")
        for n in nodes:
            if not Path(n.get("hostPath") or n["path"]).exists():
                raise StartError(f"device node {n.get('hostPath') or n['path']} does not exist")
        for h in hooks:
            if not Path(h["path"]).exists():
                raise StartError(f"hook {h['path']} does not exist")
        return Started(env, mounts, nodes, hooks)

    def _cdi_edits(self, qualified: str) -> tuple[str, dict]:
        kind, _, name = qualified.partition("=")
        if self.cdi_dir.is_dir():
            for spec_file in sorted(self.cdi_dir.glob("*.json")):
                spec = json.loads(spec_file.read_text())
                if spec.get("kind") != kind:
                    continue
                for d in spec.get("devices", []):
                    if d["name"] == name:
                        return str(spec_file), {
                            "common": spec.get("containerEdits") or {},
                            "own": d.get("containerEdits") or {},
                        }
        raise StartError(f"CDI device {qualified}: unresolvable, no spec in {self.cdi_dir} names it")
