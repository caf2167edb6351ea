"""One small HTTP endpoint for the processes that have no other (the legacy device plugin, the scheduler
extender): GET /metrics (Prometheus text), /healthz (200 while the process serves), /readyz (200 once
`ready()` returns ""; 503 with its reason before). Bound on the pod's IP for the kubelet's probes and
Prometheus; the extender's own verbs stay on its loopback address."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class ProbeServer:
    def __init__(self, addr: str, registry: CollectorRegistry, ready: Callable[[], str] = lambda: "") -> None:
        host, _, port = addr.rpartition(":")
        outer = self
        self.registry = registry
        self.ready = ready

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # probes every few seconds: not worth a log line
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, kind, code = generate_latest(outer.registry), CONTENT_TYPE_LATEST, 200
                elif path in ("/healthz", "/readyz"):
                    why = outer.ready() if path == "/readyz" else ""
                    body, kind, code = (why or "ok").encode(), "text/plain", 503 if why else 200
                else:
                    body, kind, code = f"no route GET {path}".encode(), "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, args=(0.2,), name="probes", daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
