"""A claim is unattributed (its region reports processes NVML never shows) only when its region reports any:
an idle claim, region empty and nothing of it on its GPU beside another pod's process, is not reported
(docs/limiter.md "The cross-check"); one whose region reports a process is."""

from __future__ import annotations

from driver.plugin.enforcement.crosscheck import ClaimView, GpuProcess, cross_check

MIB = 1 << 20


def _claim(reported: int) -> ClaimView:
    return ClaimView("a", "team", "idle", ("GPU-A",), (0,), frozenset(), reported_processes=reported)


def test_an_idle_claim_next_to_another_process_is_not_unattributed():
    processes = {"GPU-A": [GpuProcess(66, MIB)]}
    assert cross_check([_claim(0)], processes).unattributed == []
    assert cross_check([_claim(1)], processes).unattributed == ["a"]
