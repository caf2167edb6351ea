"""Exported JSON Schemas: committed files are current, and they accept and reject what parse_config does."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.v1alpha1 import ConfigError, json_schemas, parse_config
from api.v1alpha1.schema import SCHEMA_DIR, export, render

API = "gpu.carve.dev/v1alpha1"


def test_committed_schemas_are_current() -> None:
    expected = {f"{kind}.json": render(schema) for kind, schema in json_schemas().items()}
    committed = {p.name: p.read_bytes() for p in SCHEMA_DIR.glob("*.json")}
    assert committed == expected, "run `python -m api.v1alpha1.schema` to refresh api/v1alpha1/schemas/"


def test_export_writes_one_file_per_kind(tmp_path: Path) -> None:
    written = export(tmp_path / "out")
    assert sorted(p.name for p in written) == ["GpuConfig.json", "SliceConfig.json"]
    for path in written:
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def _schema_accepts(obj: dict) -> bool:
    kind = obj.get("kind")
    schemas = json_schemas()
    if kind not in schemas:
        return False
    return jsonschema.Draft202012Validator(schemas[kind]).is_valid(obj)


def _parser_accepts(obj: dict) -> bool:
    try:
        parse_config(obj)
    except ConfigError:
        return False
    return True


EXAMPLES = [
    {"apiVersion": API, "kind": "GpuConfig"},
    {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}},
    {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeSlicing": {}}},
    {"apiVersion": API, "kind": "GpuConfig", "sharing": {"timeSlicing": {"interval": "Short"}}},
    {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "Exclusive", "timeSlicing": None}},
    {"apiVersion": API, "kind": "SliceConfig", "corePolicy": "force", "priority": "low", "oomPolicy": "kill"},
    {"apiVersion": API, "kind": "SliceConfig", "corePolicy": "Force"},
    {"apiVersion": API, "kind": "SliceConfig", "extra": 1},
    {"kind": "SliceConfig"},
    {"apiVersion": API},
]


@pytest.mark.parametrize("obj", EXAMPLES, ids=[json.dumps(e, sort_keys=True) for e in EXAMPLES])
def test_schema_and_parser_agree_on_examples(obj: dict) -> None:
    assert _schema_accepts(obj) == _parser_accepts(obj)


_word = st.sampled_from(["default", "force", "disable", "high", "low", "error", "kill", "x", "", "Default"])
_value = st.one_of(_word, st.integers(-1, 2), st.booleans(), st.none())
_slice = st.fixed_dictionaries(
    {"apiVersion": st.just(API), "kind": st.just("SliceConfig")},
    optional={"corePolicy": _value, "priority": _value, "oomPolicy": _value, "cores": _value},
)
_interval = st.sampled_from(["Default", "Short", "Medium", "Long", "long", 3])
_gpu = st.fixed_dictionaries(
    {"apiVersion": st.just(API), "kind": st.just("GpuConfig")},
    optional={
        "sharing": st.fixed_dictionaries(
            {},
            optional={
                "strategy": st.sampled_from(["Exclusive", "TimeSlicing", "MPS", 0]),
                "timeSlicing": st.one_of(
                    st.none(), st.fixed_dictionaries({}, optional={"interval": _interval, "x": _value})
                ),
            },
        )
    },
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_slice, _gpu))
def test_schema_and_parser_agree_on_generated_objects(obj: dict) -> None:
    assert _schema_accepts(obj) == _parser_accepts(obj)
