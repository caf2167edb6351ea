"""The over-quota rule allows each of a claim's processes its CUDA context on top of the quota and its 5%
(docs/limiter.md: "quota + 5% + 512 MiB per process"), whatever the quota's size: three processes of a
1 GiB claim, each holding its context and a third of the quota, are within; a little more is over."""

from __future__ import annotations

from driver.plugin.enforcement.crosscheck import ClaimView, GpuProcess, cross_check

MIB = 1 << 20


def _claim(limit: int) -> list[ClaimView]:
    return [ClaimView("a", "team", "train", ("GPU-A",), (limit,), frozenset({1, 2, 3}))]


def test_three_processes_of_a_1gib_claim_each_with_its_context_are_within_the_quota():
    each = 512 * MIB + 1024 * MIB // 3  # a context NVML counts and the limiter does not, plus a third
    within = {"GPU-A": [GpuProcess(pid, each) for pid in (1, 2, 3)]}
    assert cross_check(_claim(1024 * MIB), within).over_quota == []


def test_past_the_quota_its_margin_and_three_contexts_the_claim_is_over():
    allowed = 1024 * MIB + 1024 * MIB // 20 + 3 * 512 * MIB
    over = {"GPU-A": [GpuProcess(1, allowed - 2 * MIB), GpuProcess(2, MIB), GpuProcess(3, 2 * MIB)]}
    (o,) = cross_check(_claim(1024 * MIB), over).over_quota
    assert (o.claim_uid, o.used_bytes, o.limit_bytes, o.pids) == ("a", allowed + MIB, 1024 * MIB, (1, 2, 3))
