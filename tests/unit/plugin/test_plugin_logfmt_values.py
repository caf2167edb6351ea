"""The plugin's log lines as a log collector parses them (logfmt, driver/plugin/logfmt.py): one line per
event, `key=value` pairs; a list is its items joined by commas; a value that is empty or holds a space, a
quote, `=`, a tab or a newline is quoted, with backslashes, quotes and newlines escaped, so a tenant's string
in a field (a claim name, an error text) cannot forge another field or another line; a None field is left
out; levels read debug, info, warn, error."""

from __future__ import annotations

import io
import logging

import pytest

from driver.plugin import logfmt

pytestmark = pytest.mark.usefixtures("driver_logger_restored")


def _line(level=logging.INFO, name="e", **fields) -> str:
    out = io.StringIO()
    logfmt.setup("debug", stream=out)
    logfmt.event(logging.getLogger("driver.plugin.test-values"), level, name, **fields)
    text = out.getvalue()
    assert text.count("\n") == 1
    return text.rstrip("\n").split(" ", 1)[1]  # after the time


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("plain", "plain"),
        ("", '""'),
        ("two words", '"two words"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a=b", '"a=b"'),
        ("tab\there", '"tab\there"'),
        ("line\nforged=1", '"line\\nforged=1"'),
        ("back\\slash x", '"back\\\\slash x"'),
        ("back\\slash", "back\\slash"),  # nothing to quote: written as it is
        (["gpu-0", "gpu-1"], "gpu-0,gpu-1"),
        (("a b", "c"), '"a b,c"'),
        ([], '""'),
        (7, "7"),
        (True, "True"),
        (b"raw", "b'raw'"),
        ({"k": 1}, "\"{'k': 1}\""),
    ],
)
def test_each_value_is_written_so_it_parses_back(value, written):
    assert _line(v=value) == f"level=info event=e v={written}"


def test_a_none_field_is_left_out_and_the_order_kept():
    assert _line(b=1, a=None, c="x") == "level=info event=e b=1 c=x"


@pytest.mark.parametrize(
    ("level", "name"),
    [(logging.DEBUG, "debug"), (logging.INFO, "info"), (logging.WARNING, "warn"), (logging.ERROR, "error"),
     (logging.CRITICAL, "error")],
)  # fmt: skip
def test_levels_read_as_documented(level, name):
    assert _line(level).startswith(f"level={name} event=e")


def test_a_plain_log_call_is_a_msg_field():
    out = io.StringIO()
    logfmt.setup("info", stream=out)
    logging.getLogger("driver.plugin.test-values").warning("disk %s full", "one")
    assert out.getvalue().rstrip("\n").split(" ", 1)[1] == 'level=warn msg="disk one full"'
