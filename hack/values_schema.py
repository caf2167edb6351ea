"""The chart's values schema, checked against the plugin's own validation (`make release`, tests/unit/helm).

Values of `plugin.*` become `carve plugin` flags (plugin.splitCount -> CARVE_SPLIT_COUNT); a value the schema
lets through and the plugin refuses crash-loops the DaemonSet on every node. So the fragments of
helm/carve/values.schema.json that judge those values are derived here from the plugin's code (the strategy
names and selector grammar of driver/devices/rules.py, Settings' split-count bounds, the Kubernetes minors of
driver/devices/limits.py, the `choices` of every plugin flag), and the committed schema must equal them:

    python hack/values_schema.py            # check: exit 1 naming each fragment that differs
    python hack/values_schema.py --print    # the fragments to paste (the schema file stays hand-formatted)

What a JSON Schema regex cannot say (a selector named twice, more than MAX_RULES items once strategyRules
are joined) is refused by templates/validation.yaml, whose pattern is checked here too.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "helm" / "carve" / "values.schema.json"
VALIDATION = REPO / "helm" / "carve" / "templates" / "validation.yaml"
sys.path.insert(0, str(REPO))

from driver.devices.base import SPLIT_COUNT_MAX, SPLIT_COUNT_MIN  # noqa: E402
from driver.devices.limits import LIMITS  # noqa: E402
from driver.devices.rules import MAX_RULES, STRATEGY_NAMES  # noqa: E402

# str.strip() in parse_rules: the whitespace JSON values realistically carry.
_WS = r"[ \t\n\r\f\v]*"
# driver/devices/rules.py _SELECTOR, less the spaces the plugin strips from both ends of a selector.
_SEL_INNER = r"A-Za-z0-9 ._()*?\[\]!/+-"
_SEL_EDGE = r"A-Za-z0-9._()*?\[\]!/+-"


def _selector_class_matches_plugin() -> None:
    from driver.devices import rules

    expected = "^[" + _SEL_INNER + "]{1,128}$"
    if rules._SELECTOR.pattern != expected:
        raise SystemExit(f"rules._SELECTOR is now {rules._SELECTOR.pattern!r}: update hack/values_schema.py")


def strategy_item_pattern() -> tuple[str, str]:
    """(rule item `<selector>=<strategy>`, bare default `<strategy>`), as unanchored regexes."""
    names = "(" + "|".join(STRATEGY_NAMES) + ")"
    selector = f"[{_SEL_EDGE}]([{_SEL_INNER}]{{0,126}}[{_SEL_EDGE}])?"
    return f"{_WS}{selector}{_WS}={_WS}{names}{_WS}", f"{_WS}{names}{_WS}"


def strategy_pattern() -> str:
    """A whole --strategy value: items separated by commas, at most one of them a bare default."""
    rule, default = strategy_item_pattern()
    return f"^({rule},)*({default}|{rule})(,{rule})*$"


def k8s_version_pattern() -> str:
    """--k8s-version: empty, or a minor limits_for knows, as 1.34, v1.35.2 or v1.37.2-gke.100."""
    minors = "|".join(re.escape(m) for m in LIMITS)
    return rf"^(v?({minors})(\.[0-9]+([-+][0-9A-Za-z.+-]*)?)?)?$"


def _plugin_choices() -> dict[str, list[Any]]:
    """plugin.<camelCase of the flag> -> the flag's choices, for every `carve plugin` flag that has some."""
    from driver.plugin.command import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = {}
    for action in parser._actions:
        if action.choices is None or not action.option_strings:
            continue
        words = action.option_strings[-1].lstrip("-").split("-")
        out[words[0] + "".join(w.title() for w in words[1:])] = list(action.choices)
    return out


def fragments() -> dict[str, dict[str, Any]]:
    """JSON pointer (within the schema) -> the constraints the plugin's code implies there."""
    _selector_class_matches_plugin()
    rule, default = strategy_item_pattern()
    base = "/properties/plugin/properties"
    out: dict[str, dict[str, Any]] = {
        f"{base}/strategy": {"type": "string", "minLength": 1, "pattern": strategy_pattern()},
        f"{base}/strategyRules": {"type": "array", "maxItems": MAX_RULES},
        f"{base}/strategyRules/items": {"type": "string", "pattern": f"^({rule}|{default})$"},
        f"{base}/splitCount": {"type": "integer", "minimum": SPLIT_COUNT_MIN, "maximum": SPLIT_COUNT_MAX},
        f"{base}/k8sVersion": {"type": "string", "pattern": k8s_version_pattern()},
    }
    for value, choices in _plugin_choices().items():
        if value == "health" or value.startswith("health"):
            continue  # --health-* flags live under plugin.health (free-text effects are checked by pattern)
        out[f"{base}/{value}"] = {"enum": choices}
    return out


def _at(schema: dict[str, Any], pointer: str) -> dict[str, Any] | None:
    node: Any = schema
    for part in pointer.strip("/").split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check(schema: dict[str, Any] | None = None, validation: str | None = None) -> list[str]:
    """Every way the committed schema (and validation.yaml's pattern) differ from the plugin's rules."""
    schema = json.loads(SCHEMA.read_text()) if schema is None else schema
    validation = VALIDATION.read_text() if validation is None else validation
    problems = []
    for pointer, want in fragments().items():
        have = _at(schema, pointer)
        if have is None:
            problems.append(f"{pointer}: missing (want {json.dumps(want)})")
            continue
        for key, value in want.items():
            if have.get(key) != value:
                problems.append(f"{pointer}/{key}: {json.dumps(have.get(key))}, want {json.dumps(value)}")
    quoted = json.dumps(strategy_pattern())  # a Go template string literal is a JSON string literal here
    if quoted not in validation:
        problems.append(f"{VALIDATION.relative_to(REPO)}: its strategy pattern is not {quoted}")
    if f"gt (len $items) {MAX_RULES}" not in validation:
        problems.append(f"{VALIDATION.relative_to(REPO)}: its item limit is not MAX_RULES={MAX_RULES}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the generated fragments")
    args = parser.parse_args(argv)
    if args.print:
        for pointer, want in fragments().items():
            print(f"{pointer}: {json.dumps(want)}")
        print(f"validation.yaml strategy pattern: {json.dumps(strategy_pattern())}")
        return 0
    problems = check()
    for p in problems:
        print(f"values.schema.json differs from the plugin's validation: {p}", file=sys.stderr)
    if not problems:
        print(f"{SCHEMA.relative_to(REPO)}: agrees with the plugin's validation ({len(fragments())} values)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
