"""The plugin's claims directory may be the root of a filesystem of its own (a tmpfs or a volume mounted
at <plugin dir>/claims): CARVE_LIMITS_SOURCE then names its root "/", and the limiter must look for the
claim's mount at root /<uid>/limits, not //<uid>/limits (limits.c, limits_source and mount_is_plugins: a
root of "/" and a root with trailing slashes name the directory the same way).

The claims directory is a tmpfs mounted in the test's mount namespace, and CARVE_LIMITS_SOURCE is what the
plugin's own code (driver.limits.mounts.limits_source) computes there. The pod's own writable limits
directory names the GPU with 4 MiB, the plugin's file 8 MiB; 6 MiB fit only where the plugin's mount is
trusted (untrusted, the tightest file holds)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import CLIENT, REPO, Claim, write_claim
from test_limiter_escape import MIB, UID, forged_limits, require_mount_namespace

from driver.limits import ClaimLimits, DeviceLimit

CUDA_SUCCESS = 0


def on_a_filesystem_of_its_own(
    c: Claim,
    tmp_path: Path,
    alloc: int,
    claims_mount: str = "rw",
    limits_mount: str = "ro",
    source_tail: str = "",
    source_root: str | None = None,
    minor_shift: int = 0,
    pod_mounts: str = "",
) -> subprocess.CompletedProcess:
    """Allocate `alloc` bytes in a "container" whose claim's limits directory is the plugin's mount of
    <claims>/<uid>/limits, <claims> being a tmpfs's root remounted `claims_mount` (its superblock's
    read-only flag) and the claim's limits mount remounted `limits_mount` (its per-mount flag). The pod
    brings a limits directory of its own naming the GPU with 4 MiB. CARVE_LIMITS_SOURCE is computed
    inside, by the plugin's code, its root replaced by `source_root` where given, `source_tail` appended,
    its minor number moved by `minor_shift`. `pod_mounts` (shell) runs after the plugin's mounts. The
    shell prints on stderr what the limiter will read: `source <CARVE_LIMITS_SOURCE>`, `options <the
    limits mount's per-mount options>` and `st_rdonly <0|1>` (the limits file's fstatvfs flag), so a test
    can check it made the case it means."""
    uuid = json.loads(c.run("uuids").stdout)[0]
    staging = tmp_path / "staging"  # the claim's files, copied into the tmpfs inside the namespace
    staging.mkdir()
    write_claim(
        staging / "region", ClaimLimits((DeviceLimit(8 * MIB, 0, uuid=uuid),), f"/var/run/carve/{UID}/region")
    )
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    claims = shlex.quote(str(tmp_path / "claims"))
    mounted = f"/var/run/carve/{UID}"
    source = f'from driver.limits.mounts import limits_source; s = limits_source("{tmp_path / "claims"}")'
    if source_root is not None:  # the plugin's device, another root
        source += f"; s = ':'.join(s.split(':', 2)[:2] + [{source_root!r}])"
    if minor_shift:  # the plugin's root, a device one minor number off
        source += f"; ma, mi, r = s.split(':', 2); s = f'{{ma}}:{{int(mi) + {minor_shift}}}:{{r}}'"
    source += "; print(s)"
    st_rdonly = f'import os; print("st_rdonly", int(bool(os.statvfs("{mounted}/limits/limits").f_flag & 1)))'
    script = f"""
set -e
mount -t tmpfs tmpfs /run
mkdir -p {claims} && mount -t tmpfs tmpfs {claims}
mkdir -p {claims}/{UID} && cp -r {shlex.quote(str(staging / "limits"))} {claims}/{UID}/
mount -o remount,{claims_mount} {claims}
# the region stays on the host's writable disk: the limiter writes it, whatever the claims tmpfs allows
mkdir -p {mounted}/limits && touch {mounted}/region
mount --bind {shlex.quote(str(staging / "region"))} {mounted}/region
mount --bind {claims}/{UID}/limits {mounted}/limits
mount -o remount,bind,{limits_mount} {mounted}/limits
mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/
{pod_mounts}
CARVE_LIMITS_SOURCE="$(env -u LD_PRELOAD "{sys.executable}" -c {shlex.quote(source)}){source_tail}"
export CARVE_LIMITS_SOURCE
echo "source $CARVE_LIMITS_SOURCE" >&2
grep -F ' /run/carve/{UID}/limits ' /proc/self/mountinfo | cut -d' ' -f6 | sed 's/^/options /' >&2
env -u LD_PRELOAD "{sys.executable}" -c {shlex.quote(st_rdonly)} >&2
exec "{CLIENT}" alloc {alloc}
"""
    # no primary claim (CARVE_REGION empty) and the default regions root, /var/run/carve: the limiter
    # meets the pod's directory first, then the plugin's, and picks by trust
    env = c.env(CARVE_MEMORY_LIMIT="1T", CARVE_REGION="", CARVE_CORE_POLICY="disable")
    env.pop("CARVE_REGION_DIR")
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("source_tail", ["", "/", "//"], ids=["root", "root-slash", "root-slashes"])
def test_the_plugins_mount_is_trusted_when_its_claims_directory_is_a_filesystems_root(
    claim: Callable[..., Claim], tmp_path: Path, source_tail: str
) -> None:
    require_mount_namespace()
    c = claim()
    out = on_a_filesystem_of_its_own(c, tmp_path, 6 * MIB, source_tail=source_tail)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("source ")]
    assert len(lines) == 1 and lines[0].endswith(":/" + source_tail), out.stderr  # the root is "/"
    assert out.stdout.strip() == str(CUDA_SUCCESS), out.stderr  # trusted: the plugin's 8 MiB hold
