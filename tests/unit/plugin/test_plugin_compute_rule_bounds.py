"""The compute cross-check's rule at its boundaries (driver/plugin/enforcement/crosscheck.py): a claim is
over its share only past the margin, `default` permits a burst only while every neighbour is under the
limiter's busy threshold, `force` never does, and the window is the last CORE_WINDOW samples, all over
(survivors of generated mutants)."""

from __future__ import annotations

import pytest

from driver.plugin.enforcement.crosscheck import (
    CORE_MARGIN,
    CORE_WINDOW,
    NEIGHBOUR_BUSY,
    POLICY_DEFAULT,
    POLICY_DISABLE,
    POLICY_FORCE,
    CoreSample,
    over_share,
    unpermitted_excess,
)

SHARE = 30


@pytest.mark.parametrize("policy", [POLICY_FORCE, POLICY_DEFAULT])
def test_the_margin_is_allowed_and_one_point_past_it_is_not(policy):
    busy = NEIGHBOUR_BUSY  # a neighbour exactly at the threshold is busy (the limiter's rule)
    assert unpermitted_excess(CoreSample(SHARE + CORE_MARGIN, busy), SHARE, policy) == 0
    over = SHARE + CORE_MARGIN + 1
    assert unpermitted_excess(CoreSample(over, busy), SHARE, policy) == over - SHARE


def test_default_permits_a_burst_only_while_the_neighbours_are_under_the_busy_threshold():
    used = SHARE + CORE_MARGIN + 20
    assert unpermitted_excess(CoreSample(used, NEIGHBOUR_BUSY - 1), SHARE, POLICY_DEFAULT) == 0
    assert unpermitted_excess(CoreSample(used, NEIGHBOUR_BUSY), SHARE, POLICY_DEFAULT) == used - SHARE
    # force: over whatever the neighbours do, an idle GPU included
    assert unpermitted_excess(CoreSample(used, 0), SHARE, POLICY_FORCE) == used - SHARE


@pytest.mark.parametrize(("share", "policy"), [(0, POLICY_FORCE), (SHARE, POLICY_DISABLE)])
def test_no_compute_limit_or_disable_is_never_over(share, policy):
    assert unpermitted_excess(CoreSample(100, 100), share, policy) == 0


def test_the_window_needs_its_last_samples_all_over_and_reports_their_mean():
    over, fine = CoreSample(60, 50), CoreSample(SHARE, 50)
    assert over_share([over] * (CORE_WINDOW - 1), SHARE, POLICY_FORCE) is None  # not a full window yet
    assert over_share([fine] + [over] * CORE_WINDOW, SHARE, POLICY_FORCE) == 60  # an older sample is out
    assert over_share([over] * CORE_WINDOW + [fine], SHARE, POLICY_FORCE) is None  # the last one is fine
    ramp = [CoreSample(60 + 3 * i, 50) for i in range(CORE_WINDOW)]
    assert over_share(ramp, SHARE, POLICY_FORCE) == round(sum(s.used for s in ramp) / CORE_WINDOW)
