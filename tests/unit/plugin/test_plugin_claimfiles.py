"""write_claim_files: the one rule for a claim's (or legacy allocation's) directory, used by the DRA preparer
and the legacy device plugin alike."""

from __future__ import annotations

import pytest

from driver import names
from driver.legacy import prestart
from driver.limits import ClaimLimits, DeviceLimit, read_limits
from driver.limits.region import Region
from driver.plugin.claims import preparer
from driver.plugin.container.claimfiles import LimiterMissing, write_claim_files
from driver.plugin.container.edits import ClaimFiles

GIB = 1024**3
LIMITS = ClaimLimits(devices=(DeviceLimit(2 * GIB, 30, uuid="GPU-A"),), region_path="/var/run/carve/u/region")


def limiter_dir(tmp_path, hook: bool = True, library: bool = True):
    d = tmp_path / "limiter"
    d.mkdir()
    if library:
        (d / names.LIMITER_LIBRARY).write_bytes(b"\0")
    if hook:
        (d / names.HOOK_BINARY).write_bytes(b"\0")
    return d


def test_writes_private_dirs_and_a_region_its_containers_can_reach(tmp_path):
    files = ClaimFiles(tmp_path / "claims" / "u")
    write_claim_files(files, limiter_dir(tmp_path), LIMITS)
    assert (tmp_path / "claims").stat().st_mode & 0o777 == 0o700
    assert files.root.stat().st_mode & 0o777 == 0o700
    assert files.region_dir.stat().st_mode & 0o777 == 0o755
    with Region.open(files.region) as region:
        assert (region.memory_limit(0), region.cores_limit(0)) == (2 * GIB, 30)
    # The limits file the limiter enforces, next to the region (its directory is mounted read-only).
    view = read_limits(files.limits)
    assert (view.memory_limits, view.uuids, view.generation) == ((2 * GIB,), ("GPU-A",), 1)
    write_claim_files(files, tmp_path / "limiter", LIMITS)  # again (PreStartContainer runs at every start)
    assert read_limits(files.limits).generation == 2


@pytest.mark.parametrize(("hook", "library", "missing"), [(True, False, "libcarve"), (False, True, "hook")])
def test_a_missing_limiter_or_hook_is_refused_before_anything_is_written(tmp_path, hook, library, missing):
    files = ClaimFiles(tmp_path / "claims" / "u")
    with pytest.raises(LimiterMissing, match=missing):
        write_claim_files(files, limiter_dir(tmp_path, hook, library), LIMITS)
    assert not files.root.exists()


def test_both_writers_use_the_one_function():
    # No second copy: the preparer and the legacy plugin's PreStartContainer call this very function.
    assert preparer.write_claim_files is write_claim_files
    assert prestart.write_claim_files is write_claim_files
