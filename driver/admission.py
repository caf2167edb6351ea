"""Admission webhooks over HTTPS (AdmissionReview v1): the edge both carve webhooks share, the controller's
(namespace budgets, the HAMi conversion: driver/controller/command.py routes them) and the legacy shim's
(driver/legacy/webhook.py). Each route is a pure handler, request -> answer; this module bounds the body
(max_body), answers a bad body with a 400 and an unexpected error with a 500 for that request only, and turns
an answer into the AdmissionResponse (a 403 status with the message when refused, a JSONPatch when given).
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
MAX_BODY = 3 << 20  # the API server's own request limit is 3 MiB: the default bound


class Answer(Protocol):
    """What a handler returns (driver/quota/budget.Decision, driver/convert/webhook.Mutation): allowed,
    message, and optionally a JSONPatch `patch`."""

    @property
    def allowed(self) -> bool: ...

    @property
    def message(self) -> str: ...


Handler = Callable[[Mapping[str, Any]], Answer]


def admission_response(body: Mapping[str, Any], handler: Handler) -> dict[str, Any]:
    request = body.get("request")
    if body.get("kind") != "AdmissionReview" or not isinstance(request, Mapping):
        raise ValueError("body: expected an AdmissionReview with a request")
    answer = handler(request)
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": answer.allowed}
    if not answer.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": answer.message}
    patch = getattr(answer, "patch", ())
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(patch)).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class AdmissionServer:
    """Routes (path -> handler) over HTTPS; plain HTTP when no certificate is given (tests)."""

    def __init__(
        self,
        addr: str,
        routes: dict[str, Handler],
        cert_file: str = "",
        key_file: str = "",
        max_body: int = MAX_BODY,
    ) -> None:
        host, _, port = addr.rpartition(":")
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                outer._serve(self)

        self.routes = routes
        self.max_body = max_body
        self.httpd = ThreadingHTTPServer((host or "0.0.0.0", int(port)), _Handler)
        self.httpd.daemon_threads = True
        if cert_file:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(cert_file, key_file)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]

    def start(self) -> AdmissionServer:
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="webhooks", daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        def reply(code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            h.send_response(code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        path = h.path.split("?", 1)[0].rstrip("/")
        handler = self.routes.get(path)
        if handler is None:
            return reply(404, {"error": f"no route POST {h.path}"})
        try:
            length = int(h.headers.get("Content-Length") or "0")
        except ValueError:
            return reply(400, {"error": "Content-Length: not a number"})
        if not 0 <= length <= self.max_body:
            h.close_connection = True
            return reply(
                413, {"error": f"request body of {length} bytes is over the {self.max_body}-byte limit"}
            )
        try:
            body = json.loads(h.rfile.read(length))
            if not isinstance(body, dict):
                raise ValueError("body: expected a JSON object")
            return reply(200, admission_response(body, handler))
        except (ValueError, UnicodeDecodeError) as e:
            return reply(400, {"error": f"{path}: {e}"})
        except Exception as e:
            event(log, logging.ERROR, "webhook.internal-error", exc_info=True, path=path, error=repr(e))
            return reply(500, {"error": f"internal error: {type(e).__name__}: {e}"})
