"""The compute cross-check's busy-neighbour threshold is the one docs/limiter.md states ("the GPU's other
processes were busy (>= 5% together, the limiter's rule)") and the one the limiter itself applies
(native/src/feedback.c, NEIGHBOUR_MIN): a `default` claim over its share beside neighbours at 4% was allowed
to burst, beside neighbours at 5% it was not. Were the plugin's threshold another than the limiter's, the
plugin would report (and under --kill-unenforced kill) a claim its limiter let burst."""

from __future__ import annotations

import re
from pathlib import Path

from driver.plugin.enforcement.crosscheck import (
    NEIGHBOUR_BUSY,
    POLICY_DEFAULT,
    CoreSample,
    unpermitted_excess,
)

REPO = Path(__file__).resolve().parents[3]


def test_the_threshold_is_the_limiters():
    source = (REPO / "native/src/feedback.c").read_text()
    (value,) = re.findall(r"#define NEIGHBOUR_MIN (\d+)", source)
    assert int(value) == NEIGHBOUR_BUSY


def test_neighbours_at_5_percent_together_are_busy_and_at_4_not():
    assert unpermitted_excess(CoreSample(80, 4), 30, POLICY_DEFAULT) == 0
    assert unpermitted_excess(CoreSample(80, 5), 30, POLICY_DEFAULT) == 50
