"""The optional mutating admission webhook (off by default): pure decisions plus its HTTPS edge.

For a pod that asks for any of the legacy resources (init containers included) it
- sets `schedulerName` to the carve scheduler when the pod names none or `default-scheduler` (a pod that
  names another scheduler is left alone);
- adds `nvidia.com/gpu: <default-gpu-num>` to a container that asks for memory, a percentage or cores but
  no GPU count: the kubelet never calls Allocate for a container without a registered resource;
- denies a privileged container that asks for a GPU: it would see every GPU and bypass the limiter;
- denies a pod the extender would never place (its request does not parse, or a container asks a priority
  the admin does not allow in its namespace: docs/legacy.md, "Priority"), with the extender's reason.
Answers are AdmissionReview v1 with a JSONPatch.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from driver import names
from driver.legacy.request import Defaults, RequestError, pod_request, wants_legacy_gpu
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20
SIZE_NAMES = (names.LEGACY_GPUMEM, names.LEGACY_GPUMEM_PERCENTAGE, names.LEGACY_GPUCORES)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str = ""
    patch: tuple[dict, ...] = ()


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def review(
    pod: dict,
    scheduler_name: str = names.LEGACY_SCHEDULER_NAME,
    default_gpu_num: int = 1,
    defaults: Defaults | None = None,
) -> Decision:
    if not wants_legacy_gpu(pod):
        return Decision(True)
    try:
        pod_request(pod, defaults or Defaults(gpu_num=default_gpu_num))
    except RequestError as e:
        return Decision(False, f"the carve scheduler would never place this pod: {e}")
    spec = pod.get("spec") or {}
    patch: list[dict] = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            res = c.get("resources") or {}
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            asked = {**requests, **limits}
            if not any(n in asked for n in (names.LEGACY_GPU, *SIZE_NAMES)):
                continue
            if (c.get("securityContext") or {}).get("privileged"):
                return Decision(
                    False,
                    f"container {c.get('name')} is privileged and asks for a GPU share; "
                    "a privileged container sees every GPU and is not limited",
                )
            if names.LEGACY_GPU not in asked and default_gpu_num > 0:
                base = f"/spec/{key}/{i}/resources"
                if not res:
                    patch.append({"op": "add", "path": base, "value": {}})
                if "limits" not in res:
                    patch.append({"op": "add", "path": f"{base}/limits", "value": {}})
                gpu = _escape(names.LEGACY_GPU)
                patch.append({"op": "add", "path": f"{base}/limits/{gpu}", "value": str(default_gpu_num)})
    if spec.get("schedulerName") in (None, "", "default-scheduler"):
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name})
    return Decision(True, patch=tuple(patch))


def admission_response(
    body: dict, scheduler_name: str, default_gpu_num: int, defaults: Defaults | None = None
) -> dict:
    """AdmissionReview in -> AdmissionReview out (v1)."""
    request = body.get("request")
    if body.get("kind") != "AdmissionReview" or not isinstance(request, dict):
        raise ValueError("body: expected an AdmissionReview with a request")
    pod = request.get("object") or {}
    if (
        isinstance(pod, dict)
        and request.get("namespace")
        and not (pod.get("metadata") or {}).get("namespace")
    ):
        # A created pod's namespace is the request's (the object may not carry it yet).
        pod = {**pod, "metadata": {**(pod.get("metadata") or {}), "namespace": request["namespace"]}}
    decision = review(pod, scheduler_name, default_gpu_num, defaults)
    response: dict = {"uid": request.get("uid", ""), "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"code": 403, "message": decision.message}
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(decision.patch)).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class WebhookServer:
    """POST /mutate over HTTPS (plain HTTP when no certificate is given, for tests)."""

    def __init__(
        self,
        addr: str,
        scheduler_name: str,
        default_gpu_num: int,
        cert_file: str = "",
        key_file: str = "",
        defaults: Defaults | None = None,
    ) -> None:
        host, _, port = addr.rpartition(":")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args) -> None:
                pass

            def do_POST(self) -> None:
                outer._serve(self)

        self.scheduler_name = scheduler_name
        self.default_gpu_num = default_gpu_num
        self.defaults = defaults
        self.httpd = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self.httpd.daemon_threads = True
        if cert_file:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(cert_file, key_file)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="webhook", daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        def reply(code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            h.send_response(code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        if h.path.rstrip("/") != "/mutate":
            return reply(404, {"error": f"no route POST {h.path}"})
        try:
            length = int(h.headers.get("Content-Length") or "0")
        except ValueError:
            return reply(400, {"error": "Content-Length: not a number"})
        if not 0 <= length <= MAX_BODY:
            h.close_connection = True
            return reply(413, {"error": f"request body of {length} bytes is over the {MAX_BODY}-byte limit"})
        try:
            body = json.loads(h.rfile.read(length))
            if not isinstance(body, dict):
                raise ValueError("body: expected a JSON object")
            return reply(
                200, admission_response(body, self.scheduler_name, self.default_gpu_num, self.defaults)
            )
        except (ValueError, UnicodeDecodeError) as e:
            return reply(400, {"error": f"/mutate: {e}"})
        except Exception as e:
            event(log, logging.ERROR, "webhook.internal-error", exc_info=True, error=repr(e))
            return reply(500, {"error": f"internal error: {type(e).__name__}: {e}"})
