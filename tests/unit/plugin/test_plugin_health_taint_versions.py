"""Which warning-only (effect None) health taints the plugin publishes by the API server's version
(driver/plugin/health/taints.py): from 1.35 on, not before, and a version it cannot read counts as the
oldest it serves (1.34), so it never publishes an effect the server would refuse; the other effects are
published whatever the version."""

from __future__ import annotations

import pytest

from driver.plugin.health.policy import CAUSE_LOST, TaintPolicy
from driver.plugin.health.taints import health_marks

POLICY = TaintPolicy("None", "NoSchedule")


@pytest.mark.parametrize(
    ("version", "warned"),
    [("1.35", True), ("1.35.2", True), ("2.0", True), ("1.34", False), ("1.9", False), ("v1.36", False),
     ("1", False), ("", False), ("1.x", False)],
)  # fmt: skip
def test_warning_only_taints_need_1_35_and_an_unreadable_version_is_the_oldest(version, warned):
    marks = health_marks({0: "xid-79", 1: CAUSE_LOST}, POLICY, taints_off=False, k8s_version=version)
    assert sorted(marks["taints"]) == ([0, 1] if warned else [1])
    assert marks["taints"][1] == [
        {"key": "gpu.carve.dev/unhealthy", "value": CAUSE_LOST, "effect": "NoSchedule"}
    ]


def test_no_taint_left_to_publish_gives_no_marks():
    assert health_marks({0: "xid-79"}, POLICY, taints_off=False, k8s_version="1.34") == {}
