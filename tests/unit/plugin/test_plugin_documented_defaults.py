"""The defaults docs/plugin.md's flag table gives are the ones `carve plugin` runs with."""

import argparse
import re
from pathlib import Path

import pytest

from driver.plugin.command import add_arguments

DOC = Path(__file__).resolve().parents[3] / "docs" / "plugin.md"
ROW = re.compile(r"^\| `(--[a-z0-9-]+)` \| `([^`<]*)` \|")


def documented() -> list[tuple[str, str]]:
    """(flag, default) of each row whose default is a value, not another flag or an environment variable
    the plugin reads at start (`--driver-root`, `$NODE_NAME`)."""
    rows = [m.groups() for line in DOC.read_text().splitlines() if (m := ROW.match(line))]
    return [(flag, value) for flag, value in rows if not value.startswith(("$", "--"))]


def parser_defaults() -> dict[str, object]:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return {a.option_strings[0]: a.default for a in p._actions if a.option_strings}


def as_documented(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return '""' if value == "" else str(value)


def test_the_table_lists_the_flags_with_plain_defaults():
    flags = dict(documented())
    assert {"--region-interval", "--publish-interval", "--split-count", "--health-interval"} <= set(flags)


@pytest.mark.parametrize(("flag", "default"), documented())
def test_documented_default_is_the_parsers(flag, default):
    defaults = parser_defaults()
    assert flag in defaults, f"docs/plugin.md documents {flag}, which carve plugin does not take"
    assert as_documented(defaults[flag]) == default
