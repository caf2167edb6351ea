"""Strategy rules (driver/devices/rules.py): selectors by index and by model glob, first match wins, the
bare default, pinning, and errors that name the item and the token."""

from __future__ import annotations

import pytest

from driver.devices import parse_strategy_spec
from driver.devices.catalog import fake_gpu
from driver.devices.rules import RuleError, can_run, parse_rules, resolve


def node(*keys: str):
    return [fake_gpu(k, i, "n1") for i, k in enumerate(keys)]


MIXED = node("A100-80GB", "T4", "H100-80GB")


def strategies(text: str, gpus=MIXED) -> dict[int, str]:
    return {i: r.strategy for i, r in resolve(gpus, parse_rules(text)).items()}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("soft", {0: "soft", 1: "soft", 2: "soft"}),
        ("0=mig,soft", {0: "mig", 1: "soft", 2: "soft"}),
        ("0=mig,1=soft", {0: "mig", 1: "soft", 2: "exclusive"}),
        ("1=soft", {0: "exclusive", 1: "soft", 2: "exclusive"}),
    ],
)
def test_todays_forms_keep_their_meaning(text, expected):
    assert strategies(text) == expected
    assert parse_strategy_spec(text, MIXED) == expected


def test_a_glob_matches_the_product_name_or_the_model_key():
    assert strategies("*A100*=mig,soft") == {0: "mig", 1: "soft", 2: "soft"}  # product NVIDIA A100-SXM4-80GB
    assert strategies("T4=timeslice,exclusive") == {0: "exclusive", 1: "timeslice", 2: "exclusive"}  # key
    assert strategies("Tesla T4=slots") == {0: "exclusive", 1: "slots", 2: "exclusive"}  # product
    assert strategies("H100*=mig,A100*=soft") == {0: "soft", 1: "exclusive", 2: "mig"}


def test_globs_are_case_sensitive():
    assert strategies("*a100*=mig,soft")[0] == "soft"


def test_first_match_wins_and_the_default_comes_last_wherever_written():
    assert strategies("soft,0=exclusive,*A100*=mig") == {0: "exclusive", 1: "soft", 2: "soft"}
    assert strategies("*A100*=mig,0=exclusive")[0] == "mig"


def test_a_rule_naming_a_gpu_pins_it_the_default_does_not():
    got = resolve(MIXED, parse_rules("0=mig,T4=soft,exclusive"))
    assert [got[i].pinned for i in range(3)] == [True, True, False]
    assert got[1].rule == "T4=soft"
    assert got[2].rule == "exclusive"


def test_no_default_leaves_unnamed_gpus_exclusive_and_unpinned():
    got = resolve(MIXED, parse_rules("0=mig"))
    assert (got[1].strategy, got[1].pinned, got[1].rule) == ("exclusive", False, "")


def test_the_node_annotation_comes_first_and_pins_even_its_default():
    chart = parse_rules("*A100*=mig,soft")
    annotation = parse_rules("1=exclusive,timeslice", pin_default=True)
    got = resolve(MIXED, chart, annotation)
    assert {i: r.strategy for i, r in got.items()} == {0: "timeslice", 1: "exclusive", 2: "timeslice"}
    assert all(r.pinned and r.annotation for r in got.values())


def test_an_annotation_without_default_leaves_other_gpus_to_the_chart():
    got = resolve(MIXED, parse_rules("*A100*=mig,soft"), parse_rules("2=exclusive", pin_default=True))
    assert {i: (r.strategy, r.annotation) for i, r in got.items()} == {
        0: ("mig", False),
        1: ("soft", False),
        2: ("exclusive", True),
    }


def test_a_selector_that_matches_nothing_is_a_warning_not_an_error():
    rules = parse_rules("*B200*=mig,7=soft,0=mig,soft")
    assert rules.unmatched(MIXED) == ["*B200*=mig", "7=soft"]
    assert strategies("*B200*=mig,7=soft,soft") == {0: "soft", 1: "soft", 2: "soft"}


def test_shadowed_rules_are_found():
    assert parse_rules("*=soft,0=mig").shadowed(MIXED) == ["0=mig"]
    assert parse_rules("0=mig,*=soft").shadowed(MIXED) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0=mig,1=turbo", "'1=turbo': unknown strategy 'turbo'"),
        ("0=mig,,1=soft", "empty item"),
        ("0=mig,0=soft", "'0=soft': GPU 0 named twice"),
        ("T4=mig,T4=soft", "'T4=soft': selector 'T4' named twice"),
        ("soft,mig", "'mig': a second default strategy"),
        ("0mig", "'0mig': unknown strategy '0mig'"),
        ("=mig", "'=mig': no selector"),
        ("A100;rm=mig", "'A100;rm=mig': selector 'A100;rm' is neither"),
        ("0=mig=soft", "'0=mig=soft': a second '='"),
        ("", "is empty"),
        (",".join(f"{i}=soft" for i in range(70)), "70 items, at most 64"),
    ],
)
def test_malformed_rules_name_the_item_and_the_token(text, message):
    with pytest.raises(RuleError, match=message.replace("(", r"\(")) as e:
        parse_rules(text)
    assert "--strategy" in str(e.value)


def test_can_run_names_a_gpu_without_mig():
    t4 = MIXED[1]
    assert "has no MIG support" in can_run(t4, "mig")
    assert can_run(MIXED[0], "mig") == ""
    assert can_run(t4, "soft") == ""
