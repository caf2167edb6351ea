"""An event logged with its exception (`exc_info=True`: the health monitor's failed turn, an internal error of
a prepare) is one logfmt line followed by the traceback on the next lines, so a log collector keys on the
event line and an operator still reads where it failed; `logfmt.setup` twice leaves one handler of its own and
no fewer of others'."""

from __future__ import annotations

import io
import logging

import pytest

from driver.plugin import logfmt

pytestmark = pytest.mark.usefixtures("driver_logger_restored")


def _log_to(stream: io.StringIO) -> logging.Logger:
    logfmt.setup("info", stream=stream)
    return logging.getLogger("driver.plugin.test-tracebacks")


def test_an_event_with_its_exception_is_one_line_then_the_traceback():
    out = io.StringIO()
    log = _log_to(out)
    try:
        raise ValueError("boom")
    except ValueError:
        logfmt.event(log, logging.ERROR, "health.turn-failed", exc_info=True, error="ValueError: boom")
    first, *rest = out.getvalue().rstrip("\n").split("\n")
    assert first.split(" ", 1)[1] == 'level=error event=health.turn-failed error="ValueError: boom"'
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "ValueError: boom"
    assert any("test_an_event_with_its_exception_is_one_line_then_the_traceback" in line for line in rest)


def test_an_event_without_an_exception_is_one_line():
    out = io.StringIO()
    logfmt.event(_log_to(out), logging.WARNING, "prepare.done", uid="u1")
    assert out.getvalue().count("\n") == 1 and "Traceback" not in out.getvalue()


def test_setup_twice_leaves_one_handler_of_its_own_and_the_last_stream():
    first, second, other = io.StringIO(), io.StringIO(), io.StringIO()
    _log_to(first)
    logging.getLogger("driver").addHandler(logging.StreamHandler(other))  # someone else's: left alone
    log = _log_to(second)
    logfmt.event(log, logging.INFO, "plugin.started")
    assert first.getvalue() == "" and second.getvalue().count("event=plugin.started") == 1
    assert other.getvalue().count("plugin.started") == 1
    ours = [h for h in logging.getLogger("driver").handlers if getattr(h, "_carve", False)]
    assert len(ours) == 1
