"""The health flags' values as an operator writes them (docs/health.md): --health-ignore-xids takes
comma-separated XID numbers, blanks and empty items allowed, anything else refused naming the flag and the
item; --health-taint-effect and --health-lost-effect take one of the taint effects, anything else refused
listing them."""

from __future__ import annotations

import pytest

from driver.plugin.health.policy import EFFECTS, HealthConfigError, check_effect, parse_xids


def test_xids_are_read_with_blanks_and_empty_items_skipped():
    assert parse_xids(" 13, ,31,,43 ,") == frozenset({13, 31, 43})
    assert parse_xids("") == frozenset() and parse_xids(None) == frozenset()
    assert parse_xids("999999") == frozenset({999999})


@pytest.mark.parametrize("item", ["1000000", "-5", "0x1f", "4 5", "+3"])
def test_an_item_that_is_not_an_xid_number_is_refused_naming_the_flag(item):
    with pytest.raises(HealthConfigError) as e:
        parse_xids(f"13,{item}", "--health-ignore-xids")
    assert str(e.value) == f"--health-ignore-xids: {item.strip()!r} is not an XID number"


@pytest.mark.parametrize("effect", EFFECTS)
def test_each_taint_effect_is_taken(effect):
    assert check_effect(effect, "--health-taint-effect") == effect


@pytest.mark.parametrize("effect", ["noschedule", "PreferNoSchedule", ""])
def test_another_effect_is_refused_listing_the_ones_taken(effect):
    with pytest.raises(HealthConfigError) as e:
        check_effect(effect, "--health-lost-effect")
    assert str(e.value) == f"--health-lost-effect: {effect!r} is not one of NoSchedule, NoExecute, None"
