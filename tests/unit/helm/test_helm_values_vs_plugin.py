"""Every plugin value the chart accepts, the plugin accepts too (issue 29: a value the schema let through and
the plugin refused crash-looped the DaemonSet on every node).

The schema's fragments for those values are derived from the plugin's code by hack/values_schema.py; these
tests hold the chart to it three ways: the committed schema equals the derived fragments, `helm template`
accepts exactly the probe values the plugin's own checks accept, and for generated strategy rules the
schema and validation.yaml say what parse_rules says.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from helm_render import CHART, RenderError, env_of, plugin_container, render
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.devices.base import ModelError, Settings
from driver.devices.limits import limits_for
from driver.devices.rules import MAX_RULES, parse_rules

_spec = importlib.util.spec_from_file_location("values_schema", CHART.parents[1] / "hack/values_schema.py")
values_schema = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(values_schema)
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def plugin_accepts(check) -> bool:
    try:
        check()
    except ModelError:
        return False
    return True


def helm_accepts(*sets: str) -> bool:
    try:
        render(*[a for s in sets for a in ("--set-string" if "k8sVersion" in s else "--set", s)])
    except RenderError:
        return False
    return True


def test_committed_schema_is_the_one_derived_from_the_plugin():
    assert values_schema.check() == []


def test_the_check_names_a_schema_looser_than_the_plugin():
    loose = json.loads(json.dumps(SCHEMA))
    loose["properties"]["plugin"]["properties"]["splitCount"].pop("maximum")
    loose["properties"]["plugin"]["properties"]["k8sVersion"]["pattern"] = r"^(\d+\.\d+)?$"
    problems = values_schema.check(loose)
    assert any("/splitCount/maximum" in p for p in problems), problems
    assert any("/k8sVersion/pattern" in p for p in problems), problems


@pytest.mark.parametrize("count", [0, 1, 10, 100, 101, 1000])
def test_split_count_helm_and_plugin_agree(count):
    assert helm_accepts(f"plugin.splitCount={count}") == plugin_accepts(lambda: Settings(split_count=count))


@pytest.mark.parametrize(
    "version",
    ["", "1.33", "1.34", "1.35", "v1.35.2", "1.36.0", "v1.37.2-gke.100", "1.38", "1.39", "2.0", "x"],
)
def test_k8s_version_helm_and_plugin_agree(version):
    accepted = helm_accepts(f"plugin.k8sVersion={version}")
    assert accepted == plugin_accepts(lambda: version and limits_for(version)), version
    if accepted and version:
        env = env_of(plugin_container(render("--set-string", f"plugin.k8sVersion={version}")))
        assert env["CARVE_K8S_VERSION"] == version


@pytest.mark.parametrize(
    "rules",
    [
        "soft", "mps", "foo", "soft,mig", "0=mig,1=soft,exclusive", "*A100*=mig,T4=timeslice,soft",
        "0=mig,00=soft", "T4=soft,T4=mig", "=mig", "0=mig=soft", "0=magic", "A100 =mig, soft ",
        "a;b=mig", ",".join(f"{i}=soft" for i in range(MAX_RULES + 1)),
    ],
)
def test_strategy_helm_and_plugin_agree(rules):
    escaped = rules.replace(",", r"\,")
    assert helm_accepts(f"plugin.strategy={escaped}") == plugin_accepts(lambda: parse_rules(rules)), rules


def test_strategy_rules_list_is_judged_joined():
    # Each item alone is fine; two bare defaults in all is what the plugin refuses.
    assert not helm_accepts("plugin.strategyRules[0]=soft", "plugin.strategyRules[1]=mig")
    assert not plugin_accepts(lambda: parse_rules("soft,mig"))
    assert helm_accepts("plugin.strategyRules[0]=*A100*=mig", "plugin.strategyRules[1]=soft")


def _schema_and_template_accept(rules: str) -> bool:
    """The schema's pattern, plus what templates/validation.yaml adds (item count, a selector twice)."""
    pattern = SCHEMA["properties"]["plugin"]["properties"]["strategy"]["pattern"]
    if not re.fullmatch(pattern.strip("^$"), rules):
        return False
    items = rules.split(",")
    selectors = [i.split("=")[0].strip() for i in items if "=" in i]
    selectors = [str(int(s)) if re.fullmatch("[0-9]+", s) else s for s in selectors]
    return len(items) <= MAX_RULES and len(selectors) == len(set(selectors))


TOKENS = ["soft", "mig", "exclusive", "mps", "slots", "timeslice", "bogus", "=", ",", " ", "0", "07",
          "*A100*", "T4", "H100 80GB", "[AH]1?0", "\t", ";", "é", "==", ""]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=12).map("".join))
def test_generated_strategy_rules_schema_agrees_with_parse_rules(rules):
    assert _schema_and_template_accept(rules) == plugin_accepts(lambda: parse_rules(rules)), repr(rules)
