"""Allocator inputs as carve reads them from a file or the API server: decoded from JSON, so no string in
them is an interned literal of the test's source (a check written with `is` would pass on those)."""

from __future__ import annotations

import json
from typing import Any

from driver.allocator import model


def decoded(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


def read_slice(obj: dict) -> Any:
    return model.read_slice(decoded(obj))


def read_claim(obj: dict) -> Any:
    return model.read_claim(decoded(obj))
