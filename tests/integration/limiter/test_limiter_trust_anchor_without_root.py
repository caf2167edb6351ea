"""A CARVE_LIMITS_SOURCE without a root (`<major>:<minor>:` and nothing after, or a root that does not
begin with "/") is malformed and trusts no file (limits.c, limits_source: `v[used] != '/'`), even where
the plugin's claims directory is a filesystem's root, whose own root is "/": an empty root must not be
read as that "/" (nor "claims" as "/claims").

The claims directory is a tmpfs root (test_limiter_trust_claims_at_a_filesystems_root.py); the pod's own
writable limits directory names the GPU with 4 MiB, the plugin's file 8 MiB. With no file trusted the
tightest holds: 6 MiB do not fit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, require_mount_namespace
from test_limiter_trust_claims_at_a_filesystems_root import on_a_filesystem_of_its_own

CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.mark.parametrize("root", ["", "claims"], ids=["empty", "relative"])
def test_an_anchor_without_a_root_trusts_no_file(
    claim: Callable[..., Claim], tmp_path: Path, root: str
) -> None:
    require_mount_namespace()
    c = claim()
    out = on_a_filesystem_of_its_own(c, tmp_path, 6 * MIB, source_root=root)
    assert out.returncode == 0, out.stderr
    sources = [line.split(":", 2) for line in out.stderr.splitlines() if line.startswith("source ")]
    assert len(sources) == 1 and sources[0][2] == root, out.stderr  # the anchor meant, on the tmpfs's device
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # nothing trusted: 4 MiB hold
