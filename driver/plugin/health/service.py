"""The kubelet's DRA health service on the DRA socket: v1 (1.37+) and v1alpha1 from one implementation.

The kubelet opens one NodeWatchResources stream per plugin and keeps, per device, the last health it was
sent; `allocatedResourcesStatus` in the pod's status shows it (ResourceHealthStatus gate). Every message
is the complete list of this node's devices. A message goes out when the stream opens, on every health
change (`HealthBroadcast.publish`) and every `resend_s` (the kubelet turns a device UNKNOWN when no
report arrived within its health check timeout, which we set to three resends).

Both versions are advertised at registration ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"):
the 1.37 kubelet picks the newest one a plugin lists, the 1.34-1.36 kubelets call v1alpha1 regardless.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from api.grpc import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
)

SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
MESSAGE_MAX = 1024


@dataclass(frozen=True)
class DeviceReport:
    pool: str
    device: str
    healthy: bool
    message: str = ""


class HealthBroadcast:
    """The current device list and a condition the streams wait on; `version` counts changes."""

    def __init__(self, devices: Callable[[], list[DeviceReport]], resend_s: float = 30.0):
        self.devices = devices
        self.resend_s = resend_s
        self.version = 0
        self.updated = time.time()
        self.cond = threading.Condition()
        self.closed = False

    def publish(self) -> None:
        with self.cond:
            self.version += 1
            self.updated = time.time()
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def stream(self, active: Callable[[], bool]) -> Iterator[list[DeviceReport]]:
        seen = -1
        while active():
            with self.cond:
                if self.closed:
                    return
                if seen == self.version:
                    self.cond.wait(self.resend_s)
                if self.closed:
                    return
                seen = self.version
            yield self.devices()


def _response(pb, reports: list[DeviceReport], updated: int, timeout_s: int):
    out = pb.NodeWatchResourcesResponse()
    for r in reports:
        out.devices.add(
            device=pb.DeviceIdentifier(pool_name=r.pool, device_name=r.device),
            health=pb.HEALTHY if r.healthy else pb.UNHEALTHY,
            last_updated_time=updated,
            health_check_timeout_seconds=timeout_s,
            message=r.message[:MESSAGE_MAX],
        )
    return out


class _HealthServicer:
    pb = dra_health_v1_pb2

    def __init__(self, broadcast: HealthBroadcast):
        self.broadcast = broadcast

    def NodeWatchResources(self, request, context):
        timeout_s = int(self.broadcast.resend_s * 3)
        for reports in self.broadcast.stream(context.is_active):
            yield _response(self.pb, reports, int(time.time()), timeout_s)


class HealthV1(_HealthServicer, dra_health_v1_pb2_grpc.DRAResourceHealthServicer):
    pb = dra_health_v1_pb2


class HealthV1alpha1(_HealthServicer, dra_health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    pb = dra_health_v1alpha1_pb2


def add_to_server(broadcast: HealthBroadcast, server) -> None:
    dra_health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(HealthV1(broadcast), server)
    dra_health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(HealthV1alpha1(broadcast), server)
