"""The extender's HTTP edge: POST /filter, /prioritize, /bind; GET /healthz, /readyz, /metrics.

Bodies over 1 MiB get 413, malformed JSON or arguments 400 with a message; an unexpected exception is
logged and answered 500 for that request only: the server never goes down because of a request.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from driver.cluster.decode import DecodeError, decode_object
from driver.legacy.extender.verbs import ArgsError, Extender
from driver.legacy.metrics import CONTENT_TYPE, ExtenderMetrics
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20  # 1 MiB, as HAMi's routes cap it
DRAIN_LIMIT = 8 << 20  # bodies up to this size are read and dropped before the 413; larger ones are not


class ExtenderServer:
    def __init__(self, extender: Extender, addr: str, ready: Callable[[], str] = lambda: "") -> None:
        host, _, port = addr.rpartition(":")
        self.extender = extender
        self.ready = ready  # '' when ready, else why not
        self.metrics = ExtenderMetrics()
        self.observe: Callable[[str, str, int], None] = lambda method, path, code: None  # metrics
        outer = self

        class Handler(_Handler):
            server_ref = outer

        self.httpd = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="extender-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_ref: ExtenderServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # one structured line per request instead
        pass

    def _reply(self, code: int, body: object, content_type: str = "") -> None:
        self.server_ref.observe(self.command, self.path.split("?", 1)[0], code)
        if isinstance(body, bytes):
            data = body
        else:
            data = (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(code)
        kind = content_type or ("application/json" if not isinstance(body, str) else "text/plain")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/readyz"):
            why = self.server_ref.ready() if self.path == "/readyz" else ""
            self._reply(200 if not why else 503, why or "ok")
        elif self.path == "/metrics":
            self._reply(200, self.server_ref.metrics.exposition(), CONTENT_TYPE)
        else:
            self._reply(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        started = time.monotonic()
        code, body = self._post()
        name = self.path.strip("/")
        kind = ""
        if code == 500:
            kind = "internal"
        elif code != 200:
            kind = "bad_request"
        elif isinstance(body, dict) and body.get("Error"):
            kind = "refused"
        self.server_ref.metrics.observe(name, time.monotonic() - started, kind)
        self._reply(code, body)

    def _post(self) -> tuple[int, object]:
        """(status, body) of one POST; the caller answers and counts it."""
        verbs = {
            "/filter": self.server_ref.extender.filter,
            "/prioritize": self.server_ref.extender.prioritize,
            "/bind": self.server_ref.extender.bind,
        }
        verb = verbs.get(self.path.rstrip("/") or "/")
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            self.close_connection = True
            return (400, {"Error": "Content-Length: not a number"})
        if length > MAX_BODY or length < 0:
            self.close_connection = True  # any unread body must not be parsed as the next request
            left = length if length <= DRAIN_LIMIT else 0
            while left > 0:  # read and drop a moderate body, so the client sees our answer, not a reset
                chunk = self.rfile.read(min(1 << 16, left))
                if not chunk:
                    break
                left -= len(chunk)
            return (413, {"Error": f"request body of {length} bytes is over the {MAX_BODY}-byte limit"})
        raw = self.rfile.read(length)
        if verb is None:
            return (404, {"Error": f"no route POST {self.path}"})
        try:
            # One pod per request: decoded with the nesting limit every API object gets (a body nested
            # thousands deep is this request's 400, not a RecursionError).
            args = decode_object(raw, "body")
            if not isinstance(args, dict):
                raise ArgsError("the body must be a JSON object")
            result = verb(args)
        except DecodeError as e:
            return (400, {"Error": f"{self.path}: {e}"})
        except UnicodeDecodeError as e:
            return (400, {"Error": f"{self.path}: body is not JSON: {e}"})
        except ArgsError as e:
            return (400, {"Error": f"{self.path}: {e}"})
        except Exception as e:
            event(log, logging.ERROR, "extender.internal-error", exc_info=True, path=self.path, error=repr(e))
            return (500, {"Error": f"internal error: {type(e).__name__}: {e}"})
        return 200, result
