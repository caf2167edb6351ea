"""A mount made after the plugin's, at a mount point that sorts after the plugin's, does not decide the
plugin's trust (limits.c, mount_is_plugins: only the entries whose mount point equals the limits directory
count, `strcmp(mp, mount_point) != 0` skips every other, whichever way it sorts).

test_limiter_escape.py's `test_a_mount_made_after_the_plugins_at_another_point_does_not_decide_its_trust`
mounts at /run/a, which sorts before /run/carve/<uid>/limits; a check that skipped only the points sorting
before would pass it. Here the pod's volumes are mounted after the plugin's at points sorting after it,
one far (/run/z) and one beside it (/run/carve/<uid>/limitz). The plugin's mount stays trusted: its 8 MiB
win over the pod's own 4 MiB, and 6 MiB fit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, UID, contained, contained_claim, forged_limits

CUDA_SUCCESS = 0


@pytest.mark.parametrize("point", ["/run/z", f"/run/carve/{UID}/limitz"], ids=["far", "beside"])
def test_a_later_mount_at_a_point_sorting_after_the_plugins_does_not_decide_its_trust(
    claim: Callable[..., Claim], tmp_path: Path, point: str
) -> None:
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    mounts = (
        f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
        f" && mkdir -p {point} && mount -t tmpfs tmpfs {point}"
    )
    out = contained(c, tmp_path, "pass", 6 * MIB, pod_mounts=mounts, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(CUDA_SUCCESS), out.stderr  # trusted: the plugin's 8 MiB hold
