"""The plugin's health endpoint: HTTP on --healthz-addr, for the DaemonSet's probes and for people.

GET /healthz -> 200 "ok" when the DRA socket answers an empty NodePrepareResources and the kubelet has not
refused our registration; 503 with the reason otherwise. GET /status -> JSON: registration, publishing,
prepared claims. A refused registration stays unhealthy, so the pod restarts and registers again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

from api.grpc import dra_v1_pb2, dra_v1_pb2_grpc


def check_dra_socket(socket_path: str, timeout_s: float = 2.0) -> str:
    """'' when the DRA service answers over its unix socket, else the error."""
    try:
        with grpc.insecure_channel(f"unix://{socket_path}") as channel:
            stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
            stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(), timeout=timeout_s)
        return ""
    except grpc.RpcError as e:
        return f"dra socket {socket_path}: {e.code().name}: {e.details()}"


class HealthServer:
    def __init__(self, addr: str, check: Callable[[], str], status: Callable[[], dict]):
        host, _, port = addr.rpartition(":")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/healthz"):
                    problem = outer.check()
                    self._reply(503 if problem else 200, (problem or "ok") + "\n", "text/plain")
                elif self.path.startswith("/status"):
                    self._reply(200, json.dumps(outer.status(), indent=2) + "\n", "application/json")
                else:
                    self._reply(404, "not found\n", "text/plain")

            def _reply(self, code: int, body: str, content_type: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # probes every few seconds would flood the log
                pass

        self.check = check
        self.status = status
        self.server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="healthz", daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
