"""A claim on two GPUs is judged on each: idle (no process) or without a memory limit on its first GPU, it is
still reported over quota on its second (the cross-check, docs/limiter.md "The cross-check")."""

from __future__ import annotations

import pytest

from driver.plugin.enforcement.crosscheck import ClaimView, GpuProcess, cross_check

MIB = 1 << 20


@pytest.mark.parametrize(
    ("limits", "on_first"),
    [((100 * MIB, 100 * MIB), []), ((0, 100 * MIB), [GpuProcess(7, 900 * MIB)])],
    ids=["idle-on-the-first", "no-limit-on-the-first"],
)
def test_over_quota_on_the_second_gpu_is_reported(limits, on_first):
    claim = ClaimView("a", "team", "train", ("GPU-A", "GPU-B"), limits, frozenset({7, 8}))
    processes = {"GPU-A": on_first, "GPU-B": [GpuProcess(8, 900 * MIB)]}
    (o,) = cross_check([claim], processes, allowance=0).over_quota
    assert (o.claim_uid, o.gpu_uuid, o.used_bytes, o.limit_bytes, o.pids) == (
        "a",
        "GPU-B",
        900 * MIB,
        100 * MIB,
        (8,),
    )
