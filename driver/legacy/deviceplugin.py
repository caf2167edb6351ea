"""`carve device-plugin`'s process: the v1beta1 DevicePlugin service, its socket, registration and upkeep.

Start order: inventory annotation on the node, then the socket serves, then Register (the kubelet dials back
at once for the options). A background loop re-serves and re-registers when the kubelet restarts, follows GPU
health (ListAndWatch resends the full list on a change) and collects the files of finished allocations.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from api.grpc import deviceplugin_v1beta1_pb2 as pb
from api.grpc import deviceplugin_v1beta1_pb2_grpc as pbgrpc
from driver import names
from driver.cluster.base import ClusterError
from driver.gpu.model import Gpu
from driver.legacy.allocate import AllocateError, container_response, device_ids
from driver.legacy.health import health_of, nvml_probe
from driver.legacy.identity import IdentityError, PodResourcesClient
from driver.legacy.kubeapi import LegacyApi
from driver.legacy.prestart import Allocations, AllocationSettings
from driver.legacy.records import GpuInfo, NodeGpus, node_gpus_annotation
from driver.legacy.registration import KubeletWatch, RegistrationError, register
from driver.limits import LimitsError
from driver.plugin.claims.plan import PrepareError
from driver.plugin.container.edits import DriverFilesError, HostLayout
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
MIB = 1024**2


@dataclass
class DevicePluginConfig:
    node_name: str
    record_namespace: str
    device_plugin_dir: Path = Path(names.DEVICE_PLUGIN_DIR)
    pod_resources_socket: Path = Path(names.POD_RESOURCES_SOCKET)
    state_dir: Path = Path("/var/lib/carve/legacy")
    cdi_dir: Path = Path(names.DEFAULT_CDI_DIR)
    driver_root: Path = Path("/")
    host_driver_root: Path | None = None
    proc_root: Path = Path("/proc")
    limiter_dir: Path | None = None  # default <state-dir>/lib
    split_count: int = 10
    resource: str = names.LEGACY_GPU
    delivery: str = "cdi-field"
    health_interval_s: float = 5.0
    watch_interval_s: float = 1.0
    collect_interval_s: float = 60.0
    driver_required: bool = True  # real GPUs: a missing driver node or library fails the container's start
    probe: Callable[[str], bool] = field(default=nvml_probe)


class DevicePluginService(pbgrpc.DevicePluginServicer):
    def __init__(self, plugin: LegacyDevicePlugin) -> None:
        self.plugin = plugin

    def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=False)

    def ListAndWatch(self, request, context):
        p = self.plugin
        seen = -1
        while context.is_active() and not p.stopping.is_set():
            with p.changed:
                if seen == p.version:
                    p.changed.wait(timeout=1.0)
                    continue
                seen = p.version
                devices = p.devices()
            event(
                log,
                logging.INFO,
                "listandwatch.sent",
                devices=len(devices),
                unhealthy=sum(d.health != "Healthy" for d in devices),
            )
            yield pb.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):
        # Not advertised (the GPUs come from the extender's assignment); answered sensibly anyway.
        out = pb.PreferredAllocationResponse()
        for req in request.container_requests:
            chosen = list(req.must_include_deviceIDs)
            chosen += [i for i in req.available_deviceIDs if i not in chosen][
                : max(0, req.allocation_size - len(chosen))
            ]
            out.container_responses.add(deviceIDs=chosen)
        return out

    def Allocate(self, request, context):
        result = "error"
        try:
            response = self._allocate(request, context)
            result = "ok"
            return response
        finally:
            self.plugin.observe_call("Allocate", result)

    def _allocate(self, request, context):
        p = self.plugin
        response = pb.AllocateResponse()
        for req in request.container_requests:
            ids = list(req.devices_ids)
            unknown = [i for i in ids if i not in p.known_ids]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Allocate: unknown device IDs {unknown}")
            try:
                p.allocations.forget_stale(ids)
                response.container_responses.append(container_response(ids, p.config.delivery))
            except AllocateError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            event(log, logging.INFO, "allocate.done", devices=ids)
        return response

    def PreStartContainer(self, request, context):
        result = "error"
        try:
            response = self._pre_start(request, context)
            result = "ok"
            return response
        finally:
            self.plugin.observe_call("PreStartContainer", result)

    def _pre_start(self, request, context):
        ids = list(request.devices_ids)
        try:
            self.plugin.allocations.prepare(ids)
        except (
            IdentityError,
            AllocateError,
            PrepareError,
            LimitsError,
            DriverFilesError,
            FileNotFoundError,
        ) as e:
            event(log, logging.WARNING, "prestart.failed", devices=ids, error=str(e))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"carve: {e}")
        except Exception as e:
            event(log, logging.ERROR, "prestart.internal-error", exc_info=True, devices=ids, error=repr(e))
            context.abort(grpc.StatusCode.INTERNAL, f"carve: internal error: {type(e).__name__}: {e}")
        return pb.PreStartContainerResponse()


class LegacyDevicePlugin:
    def __init__(self, config: DevicePluginConfig, api: LegacyApi, gpus: list[Gpu]) -> None:
        self.config = config
        self.api = api
        self.gpus = gpus
        self.health = {g.uuid: True for g in gpus}
        self.version = 0
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.known_ids = {i for i, _g in device_ids(gpus, config.split_count)}
        self.socket = Path(config.device_plugin_dir) / names.DEVICE_PLUGIN_SOCKET
        self.kubelet_socket = Path(config.device_plugin_dir) / names.KUBELET_SOCKET
        self.watch = KubeletWatch(self.kubelet_socket, self.socket)
        self.registration_error = ""
        self.started = threading.Event()  # set once serving and registered: /readyz
        self.observe_call: Callable[[str, str], None] = lambda method, result: None  # metrics (command.py)
        self.published: str | None = None
        self._server: grpc.Server | None = None
        self._thread: threading.Thread | None = None
        c = config
        limiter_dir = Path(c.limiter_dir) if c.limiter_dir else Path(c.state_dir) / "lib"
        layout = HostLayout.scan(
            Path(c.driver_root),
            Path(c.proc_root),
            c.host_driver_root,
            hook_dir=limiter_dir,
            driver_required=c.driver_required,
        )
        self.allocations = Allocations(
            AllocationSettings(
                c.node_name, Path(c.state_dir), Path(c.cdi_dir), limiter_dir, c.record_namespace, c.resource
            ),
            layout,
            gpus,
            api,
            PodResourcesClient(
                str(c.pod_resources_socket),
                checkpoint=Path(c.device_plugin_dir) / names.KUBELET_DEVICE_CHECKPOINT,
            ),
        )

    # --- model -----------------------------------------------------------------------------------------

    def devices(self) -> list[pb.Device]:
        return [
            pb.Device(ID=i, health="Healthy" if self.health.get(g.uuid) else "Unhealthy")
            for i, g in device_ids(self.gpus, self.config.split_count)
        ]

    def inventory(self) -> NodeGpus:
        return NodeGpus(
            gpus=tuple(
                GpuInfo(
                    uuid=g.uuid,
                    index=g.index,
                    minor=g.minor,
                    product=g.product,
                    memoryMiB=g.memory_bytes // MIB,
                    split=self.config.split_count,
                    healthy=self.health.get(g.uuid, False),
                    pciBusID=g.pci_bus_id,
                )
                for g in self.gpus
            )
        )

    def set_health(self, health: dict[str, bool]) -> None:
        with self.changed:
            if health == self.health:
                return
            event(
                log,
                logging.WARNING,
                "health.changed",
                unhealthy=sorted(u for u, ok in health.items() if not ok),
            )
            self.health = dict(health)
            self.version += 1
            self.changed.notify_all()
        self.publish_inventory()

    def publish_inventory(self) -> None:
        ann = node_gpus_annotation(self.inventory())
        if ann == self.published:
            return
        try:
            self.api.patch_node_annotations(self.config.node_name, ann)
            self.published = ann
        except ClusterError as e:
            event(log, logging.WARNING, "inventory.publish-failed", error=str(e), action="retrying")

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        Path(self.config.device_plugin_dir).mkdir(parents=True, exist_ok=True)
        self.publish_inventory()
        self._serve_and_register()
        self._thread = threading.Thread(target=self._loop, name="device-plugin", daemon=True)
        self._thread.start()
        self.started.set()

    def stop(self) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()
        if self._thread:
            self._thread.join(timeout=5)
        if self._server:
            self._server.stop(1).wait()
        if self.socket.exists():
            self.socket.unlink()

    def _serve(self) -> None:
        if self._server:
            self._server.stop(0).wait()
        if self.socket.exists() or self.socket.is_symlink():
            self.socket.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="dp"))
        pbgrpc.add_DevicePluginServicer_to_server(DevicePluginService(self), server)
        old = os.umask(0o177)
        try:
            server.add_insecure_port(f"unix://{self.socket}")
            server.start()
        finally:
            os.umask(old)
        self._server = server

    def _serve_and_register(self) -> bool:
        if self.watch.needs_registration() or self._server is None:
            self._serve()
        try:
            register(
                self.kubelet_socket,
                self.socket.name,
                self.config.resource,
                pb.DevicePluginOptions(pre_start_required=True),
            )
        except RegistrationError as e:
            self.registration_error = str(e)
            event(log, logging.WARNING, "registration.failed", error=str(e), action="retrying")
            return False
        self.registration_error = ""
        self.watch.mark_registered()
        return True

    def _loop(self) -> None:
        c = self.config
        next_health = next_collect = 0.0
        while not self.stopping.wait(c.watch_interval_s):
            if self.watch.needs_registration() or self.registration_error:
                self._serve_and_register()
            now = time.monotonic()
            if now >= next_health:
                next_health = now + c.health_interval_s
                self.set_health(health_of(self.gpus, c.probe))
                self.publish_inventory()
            if now >= next_collect:
                next_collect = now + c.collect_interval_s
                self.allocations.collect()
