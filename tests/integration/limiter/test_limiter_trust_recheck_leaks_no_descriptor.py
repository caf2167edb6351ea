"""Each time the plugin replaces a trusted limits file, the limiter checks its mount again in
/proc/self/mountinfo (limits.c, mount_is_plugins) and closes the mountinfo stream it opened: a process that
lives through many rewrites (a training job while the plugin rebalances shares) keeps a constant number of
descriptors, where one leaked per check would end in EMFILE for the process's own files.

The claim is mounted as the CDI spec mounts it, in a mount namespace, with CARVE_LIMITS_SOURCE as the plugin
sets it, so the file is trusted and every rewrite (a new inode, write_limits) is checked in full. The
client (`relimit`) lives through them; its open descriptors are counted after the first rewrite and after
the last."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from limiter_harness import CLIENT, Claim, write_claim
from test_limiter_escape import MIB, UID, contained_claim

from driver.limits import ClaimLimits, DeviceLimit, write_limits
from driver.limits.mounts import limits_source

REWRITES = 6
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


def test_rechecking_a_rewritten_trusted_limits_file_leaks_no_descriptor(
    claim: Callable[..., Claim], tmp_path: Path
) -> None:
    c, uuid = contained_claim(claim)
    host = tmp_path / "claims" / UID
    mounted = f"/var/run/carve/{UID}"

    def limits(memory: int) -> ClaimLimits:
        # a cores limit starts the feedback thread, whose ticks refresh the limits (relimit waits for one)
        return ClaimLimits((DeviceLimit(memory, 50, uuid=uuid),), f"{mounted}/region")

    host.mkdir(parents=True)
    write_claim(host / "region", limits(8 * MIB))
    setup = (
        f"mount -t tmpfs tmpfs /run && mkdir -p {mounted}/limits && touch {mounted}/region"
        f" && mount --bind {shlex.quote(str(host / 'region'))} {mounted}/region"
        f" && mount --bind {shlex.quote(str(host / 'limits'))} {mounted}/limits"
        f" && mount -o remount,bind,ro {mounted}/limits"
        f' && exec "{CLIENT}" relimit {6 * MIB}'
    )
    env = c.env(
        CARVE_REGION=f"{mounted}/region",
        CARVE_LIMITS_SOURCE=limits_source(tmp_path / "claims"),
        CARVE_TICK_MS="10",
    )
    proc = subprocess.Popen(
        ["unshare", "-m", "sh", "-c", setup],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert first and json.loads(first)["rc"] == CUDA_SUCCESS, first or proc.stderr.read()
        counts = []
        for i in range(REWRITES):
            memory = 4 * MIB if i % 2 == 0 else 8 * MIB  # 6 MiB refused, then fit again: each rewrite applied
            write_limits(host / "limits" / "limits", limits(memory))  # a new inode: its mount checked again
            proc.stdin.write("go\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            assert line, f"client ended ({proc.wait()}): {proc.stderr.read()}"
            expected = CUDA_ERROR_OUT_OF_MEMORY if memory < 6 * MIB else CUDA_SUCCESS
            assert json.loads(line)["rc"] == expected, line
            counts.append(len(os.listdir(f"/proc/{proc.pid}/fd")))  # unshare and sh exec'd the client
        assert counts[-1] == counts[0], counts  # one check per rewrite, no descriptor left behind
    finally:
        proc.kill()
        proc.wait()
