"""Each plugin log event is written once, in logfmt, even when something in the process (a library, a
`logging.basicConfig`) gave the root logger a handler of its own."""

import io
import logging

from driver.plugin import logfmt


def test_an_event_goes_to_the_logfmt_stream_only(monkeypatch):
    elsewhere, ours = io.StringIO(), io.StringIO()
    other = logging.StreamHandler(elsewhere)
    root, driver = logging.getLogger(), logging.getLogger("driver")
    monkeypatch.setattr(driver, "handlers", list(driver.handlers))
    monkeypatch.setattr(driver, "propagate", driver.propagate)
    monkeypatch.setattr(driver, "level", driver.level)
    root.addHandler(other)
    try:
        logfmt.setup("info", stream=ours)
        logfmt.event(logging.getLogger("driver.plugin.test"), logging.WARNING, "test.once", claim="c1")
    finally:
        root.removeHandler(other)
    assert "event=test.once" in ours.getvalue() and "claim=c1" in ours.getvalue()
    assert elsewhere.getvalue() == ""
