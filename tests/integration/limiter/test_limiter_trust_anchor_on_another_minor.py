"""A CARVE_LIMITS_SOURCE whose device is the plugin's but one minor number off, above or below, trusts no
file (limits.c, mount_is_plugins: `mi == want_minor`).

test_limiter_escape.py's `test_a_plugins_anchor_on_another_device_trusts_no_file` moves the minor number
below only when it is not 0, and a disk's first partition or whole disk is often minor 0 (as the tests'
own temporary directory's here): then it moves the major number instead. The claims directory here is a
tmpfs (test_limiter_trust_claims_at_a_filesystems_root.py), whose anonymous device has a minor number
above 0, so both sides are tried. The pod's own writable limits directory names the GPU with 4 MiB, the
plugin's file 8 MiB: with nothing trusted the tightest holds and 6 MiB do not fit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, require_mount_namespace
from test_limiter_trust_claims_at_a_filesystems_root import on_a_filesystem_of_its_own

CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.mark.parametrize("shift", [1, -1], ids=["above", "below"])
def test_an_anchor_one_minor_number_off_trusts_no_file(
    claim: Callable[..., Claim], tmp_path: Path, shift: int
) -> None:
    require_mount_namespace()
    c = claim()
    out = on_a_filesystem_of_its_own(c, tmp_path, 6 * MIB, minor_shift=shift)
    assert out.returncode == 0, out.stderr
    source = next(line for line in out.stderr.splitlines() if line.startswith("source "))
    assert int(source.split(":")[1]) + (-shift) > 0, out.stderr  # the tmpfs's own minor is above 0
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # nothing trusted: 4 MiB hold
