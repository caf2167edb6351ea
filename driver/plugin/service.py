"""The kubelet-facing gRPC services: DRAPlugin v1 and v1beta1 on dra.sock, Registration on the reg socket.

Both DRA versions share one Preparer; they differ only in v1's `share_id`. Every claim of a request gets
an entry in the response, errors included, so the kubelet never waits on a claim it was not told about.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from api.grpc import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from driver import names
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.preparer import Preparer
from driver.plugin.claims.status import KubeletCalls
from driver.plugin.logfmt import event

if TYPE_CHECKING:
    from driver.metrics import PluginMetrics

log = logging.getLogger(__name__)

# The kubelet picks the first DRA service it knows from this list, then (1.37+) the first health service
# (driver/plugin/health/service.py); 1.34-1.36 kubelets ignore the health entries and call v1alpha1.
SUPPORTED_VERSIONS = (
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)
PLUGIN_TYPE = "DRAPlugin"


def _refs(request) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in request.claims]


class _DraServicer:
    """Shared body of the v1 and v1beta1 servicers; `pb` is the version's message module."""

    pb = dra_v1_pb2
    api_version = "v1"
    with_share_id = True

    def __init__(
        self, preparer: Preparer, metrics: PluginMetrics | None = None, calls: KubeletCalls | None = None
    ):
        self.preparer = preparer
        self.metrics = metrics
        self.calls = calls if calls is not None else KubeletCalls()  # the status reports wait on them

    def _observe(self, operation: str, started: float, errors: list[str]) -> None:
        # A call without claims is the health probe, not the kubelet: it would swamp the figures.
        if self.metrics is not None and errors:
            self.metrics.observe_request(self.api_version, operation, time.monotonic() - started, errors)

    def NodePrepareResources(self, request, context):
        started = time.monotonic()
        with self.calls.serving():
            results = self.preparer.prepare(_refs(request))
        self._observe("prepare", started, [r.error for r in results.values()])
        response = self.pb.NodePrepareResourcesResponse()
        for uid, outcome in results.items():
            entry = response.claims[uid]
            if outcome.error:
                entry.error = outcome.error
                continue
            for d in outcome.devices:
                device = entry.devices.add(
                    request_names=d.request_names,
                    pool_name=d.pool,
                    device_name=d.device,
                    cdi_device_ids=d.cdi_ids,
                )
                if self.with_share_id and d.share_id:
                    device.share_id = d.share_id
        return response

    def NodeUnprepareResources(self, request, context):
        started = time.monotonic()
        with self.calls.serving():
            results = self.preparer.unprepare(_refs(request))
        self._observe("unprepare", started, list(results.values()))
        response = self.pb.NodeUnprepareResourcesResponse()
        for uid, error in results.items():
            response.claims[uid].error = error
        return response


class DraV1(_DraServicer, dra_v1_pb2_grpc.DRAPluginServicer):
    pb = dra_v1_pb2
    api_version = "v1"
    with_share_id = True


class DraV1beta1(_DraServicer, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    pb = dra_v1beta1_pb2
    api_version = "v1beta1"
    with_share_id = False


class RegistrationState:
    """What the kubelet said about our registration; read by the health endpoint."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.status = "pending"  # pending | registered | refused
        self.error = ""
        self.registered = threading.Event()

    def set(self, registered: bool, error: str) -> None:
        with self._lock:
            self.status = "registered" if registered else "refused"
            self.error = error
        if registered:
            self.registered.set()


class Registration(pluginregistration_pb2_grpc.RegistrationServicer):
    def __init__(self, endpoint: str, state: RegistrationState):
        self.endpoint = endpoint
        self.state = state

    def GetInfo(self, request, context):
        event(log, logging.INFO, "registration.getinfo", endpoint=self.endpoint)
        return pluginregistration_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=names.DRIVER_NAME,
            endpoint=self.endpoint,
            supported_versions=SUPPORTED_VERSIONS,
        )

    def NotifyRegistrationStatus(self, request, context):
        self.state.set(request.plugin_registered, request.error)
        if request.plugin_registered:
            event(log, logging.INFO, "registration.accepted", driver=names.DRIVER_NAME)
        else:
            event(log, logging.ERROR, "registration.refused", driver=names.DRIVER_NAME, error=request.error)
        return pluginregistration_pb2.RegistrationStatusResponse()
