"""Registering with the kubelet's device manager, and noticing when the kubelet restarts.

The kubelet deletes the sockets in its device-plugin directory and creates a fresh kubelet.sock when it
starts; it then knows no plugin. `KubeletWatch` polls kubelet.sock's identity (inode, change time) and our
own socket: a new kubelet.sock, or our socket gone, means serve again and register again. Registration
retries while the kubelet is away.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import grpc

from api.grpc import deviceplugin_v1beta1_pb2 as pb
from api.grpc import deviceplugin_v1beta1_pb2_grpc as pbgrpc
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
VERSION = "v1beta1"


class RegistrationError(Exception):
    """The kubelet refused or could not be reached; the message carries its answer."""


def register(
    kubelet_socket: Path,
    endpoint: str,
    resource: str,
    options: pb.DevicePluginOptions,
    timeout_s: float = 10.0,
) -> None:
    try:
        with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
            pbgrpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version=VERSION, endpoint=endpoint, resource_name=resource, options=options
                ),
                timeout=timeout_s,
            )
    except grpc.RpcError as e:
        raise RegistrationError(
            f"Register {resource} at {kubelet_socket}: {e.code().name}: {e.details()}"
        ) from None
    event(log, logging.INFO, "registration.accepted", resource=resource, endpoint=endpoint)


def socket_identity(path: Path) -> tuple[int, int] | None:
    """(inode, ctime ns) of a socket, or None when it is absent: a re-created socket has a new identity."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_ctime_ns)


class KubeletWatch:
    """Tells whether the kubelet restarted (or our socket vanished) since the last registration."""

    def __init__(self, kubelet_socket: Path, own_socket: Path) -> None:
        self.kubelet_socket = kubelet_socket
        self.own_socket = own_socket
        self.registered_with: tuple[int, int] | None = None

    def mark_registered(self) -> None:
        self.registered_with = socket_identity(self.kubelet_socket)

    def needs_registration(self) -> bool:
        current = socket_identity(self.kubelet_socket)
        if current is None:
            return False  # no kubelet now; register when it is back
        return self.registered_with != current or not self.own_socket.exists()
