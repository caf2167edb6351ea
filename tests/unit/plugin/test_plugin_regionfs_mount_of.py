"""Which mount holds the claims directory (driver/plugin/container/regionfs.py): the one with the longest
mount point above it, never one beside it; --region-fs decides from that mount's propagation whether a
tmpfs made there reaches the container runtime (a survivor of generated mutants: `and` written `or`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from driver.plugin.container.regionfs import _mount_of


def _target(directory: Path) -> str:
    out = subprocess.run(["findmnt", "-n", "-o", "TARGET", "-T", str(directory)], capture_output=True,
                         text=True, check=True, timeout=30)
    return out.stdout.split()[-1]  # mounts stacked on one point: the last is the one in use


@pytest.mark.parametrize("directory", ["/", "/proc/self", "/dev/shm", "/sys/kernel", "tmp"])
def test_the_mount_holding_a_directory_is_the_longest_mount_point_above_it(directory, tmp_path):
    d = tmp_path if directory == "tmp" else Path(directory)
    if not d.exists():
        pytest.fail(f"{d} does not exist on this machine")
    found = _mount_of(d)
    assert found is not None
    assert found[4] == _target(d), (d, found)
