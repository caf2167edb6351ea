"""A limits directory whose canonical path is /limits, at the filesystem's root, has no claim directory above
it, so no claim uid: the limiter does not trust it, and reads no uid out of an empty name (limits.c,
mount_is_plugins: `limits_name == mount_point`). A process whose CARVE_REGION is /region (a container
whose claim region was mounted at its root) finds its limits at /limits/limits.

The container's root is a tmpfs the test makes in a mount namespace (the system's directories bound into
it, then chroot), with the claim's region at /region and its limits directory mounted read-only at
/limits, as the plugin's file on the plugin's device; CARVE_LIMITS_SOURCE names the plugin's claims
directory. The file is one limits file among untrusted ones, the only one: its 8 MiB hold and 9 MiB do
not fit; the process must run to its end, which it does not where the uid is read out of nothing."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from limiter_harness import CLIENT, REPO, Claim, write_claim
from test_limiter_escape import MIB, UID, contained_claim

from driver.limits import ClaimLimits, DeviceLimit
from driver.limits.mounts import limits_source

CUDA_ERROR_OUT_OF_MEMORY = 2


def test_a_limits_directory_at_the_root_is_not_trusted_and_breaks_nothing(
    claim: Callable[..., Claim], tmp_path: Path
) -> None:
    c, uuid = contained_claim(claim)
    host = tmp_path / "claims" / UID
    host.mkdir(parents=True)
    write_claim(host / "region", ClaimLimits((DeviceLimit(8 * MIB, 0, uuid=uuid),), "/region"))
    root = shlex.quote(str(tmp_path / "root"))
    # the system's directories (the libraries; where /usr is merged, its links as they are), the repository
    # (the client, the limiter, the fakes) and the test's directory (the fakes' state) at their own paths,
    # and the claim at the root
    repo, here = shlex.quote(str(REPO)), shlex.quote(str(tmp_path))
    setup = f"""
set -e
mkdir -p {root} && mount -t tmpfs tmpfs {root}
for d in usr etc proc dev; do mkdir -p {root}/$d && mount --rbind /$d {root}/$d; done
mkdir -p {root}{repo} {root}{here} && mount --rbind {repo} {root}{repo} && mount --bind {here} {root}{here}
for l in bin sbin lib lib64; do
    if [ -L /$l ]; then cp -P /$l {root}/$l
    elif [ -d /$l ]; then mkdir {root}/$l && mount --rbind /$l {root}/$l; fi
done
touch {root}/region && mount --bind {shlex.quote(str(host / "region"))} {root}/region
mkdir -p {root}/limits && mount --bind {shlex.quote(str(host / "limits"))} {root}/limits
mount -o remount,bind,ro {root}/limits
exec chroot {root} "{CLIENT}" alloc {9 * MIB}
"""
    env = c.env(CARVE_REGION="/region", CARVE_LIMITS_SOURCE=limits_source(tmp_path / "claims"))
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", setup], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr  # the process ran to its end
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # its claim's 8 MiB hold
