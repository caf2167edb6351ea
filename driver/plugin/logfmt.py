"""Structured logs for the plugin: one line per event, key=value pairs (logfmt).

`event(log, "prepare.done", claim="ns/name", uid=..., devices=["gpu-0"])` writes
`time=... level=info event=prepare.done claim=ns/name uid=... devices=gpu-0`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable

_LEVEL_NAMES = {"WARNING": "warn", "CRITICAL": "error"}


def _value(v: object) -> str:
    if isinstance(v, str):
        text = v
    elif isinstance(v, Iterable) and not isinstance(v, bytes | dict):
        text = ",".join(str(x) for x in v)
    else:
        text = str(v)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def format_fields(fields: dict) -> str:
    return " ".join(f"{k}={_value(v)}" for k, v in fields.items() if v is not None)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        head = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": _LEVEL_NAMES.get(record.levelname, record.levelname.lower()),
        }
        fields = getattr(record, "fields", None)
        if fields is None:
            head["msg"] = record.getMessage()
            line = format_fields(head)
        else:
            head["event"] = record.getMessage()
            line = format_fields(head) + (" " + format_fields(fields) if fields else "")
        if record.exc_info:
            # The traceback goes on the following lines; the event line itself stays one line.
            line += "\n" + self.formatException(record.exc_info)
        return line


def event(log: logging.Logger, level: int, name: str, exc_info: bool = False, **fields: object) -> None:
    log.log(level, name, extra={"fields": fields}, exc_info=exc_info)


def setup(level: str = "info", stream=None) -> None:
    """Route the `driver` loggers to one logfmt handler (idempotent)."""
    root = logging.getLogger("driver")
    for h in list(root.handlers):
        if getattr(h, "_carve", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    handler._carve = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    root.propagate = False
