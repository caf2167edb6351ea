"""The plugin's regions root, /var/run/carve, is scanned once (binding.c, carve_region_setup): it is
always looked at, and a second time only when CARVE_REGION_DIR names another root, so a process whose
environment names it (or names none: it is the default) does not scan it twice. Each entry there with an
unusable region is logged once, not twice.

The root is built in a private mount namespace (unshare -m, as root: a tmpfs on /run), with one entry whose
region file is empty (an entry with no region and no limits file is no claim's, and is passed over in
silence: test_limiter_regions_root_entry_of_no_claim_silent.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from limiter_harness import CLIENT

MIB = 1 << 20
EMPTY = "/var/run/carve/empty"  # its region file is empty


def log_of_a_process_under(c, **env: str) -> str:
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode:
        pytest.fail("this test builds /var/run/carve in a mount namespace: it needs root and unshare -m")
    environment = c.env(CARVE_REGION="", CARVE_MEMORY_LIMIT=str(8 * MIB), **env)
    if "CARVE_REGION_DIR" not in env:
        del environment["CARVE_REGION_DIR"]  # the default, /var/run/carve
    setup = (
        f'mount -t tmpfs tmpfs /run && mkdir -p {EMPTY} && : > {EMPTY}/region && exec "{CLIENT}" alloc {MIB}'
    )
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", setup], env=environment, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stderr
    return proc.stderr


@pytest.mark.parametrize("named", [False, True], ids=["default", "named"])
def test_the_plugins_regions_root_is_scanned_once(claim, named: bool) -> None:
    env = {"CARVE_REGION_DIR": "/var/run/carve"} if named else {}
    log = log_of_a_process_under(claim(), **env)
    assert log.count(f"region {EMPTY}/region: file size does not match") == 1, log
