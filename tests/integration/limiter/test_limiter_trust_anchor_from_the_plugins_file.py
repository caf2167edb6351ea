"""The limiter takes its trust anchor from the file the plugin's CDI spec mounts read-only beside it
(/usr/local/carve/lib/limits-source, driver/names.py LIMITS_SOURCE_CONTAINER_PATH), not from the
environment, where that file is (limits.c, `anchor`).

The attack it closes: a process in the container starts a child with another CARVE_LIMITS_SOURCE, naming
the device and root of a read-only volume the pod mounted at /var/run/carve/<name>/limits (its root is in
the container's own mountinfo; a `subPath` gives the layout). Read from the environment, that anchor makes
the volume's limits file, 0444 and without a memory limit, trusted, and the GPU is bound to it: 9 MiB fit
under the plugin's 8 MiB. A process chooses its children's environment, not the container's mounts.

The plugin's file is mounted in the test's mount namespace as the runtime mounts it: /usr/local is covered
by a tmpfs whose entries are bound back from the real one, so nothing is written under the host's
/usr/local."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, contained, contained_claim

from driver.limits import ClaimLimits, DeviceLimit, create_region, write_limits
from driver.limits.mounts import limits_source

CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2
ANCHOR_AT = "/usr/local/carve/lib/limits-source"


def plugins_file_mounted(anchor: Path, keep: Path) -> str:
    """Shell, run in the namespace: the plugin's anchor file at ANCHOR_AT, read-only; /usr/local's own
    entries bound back (through `keep`, an empty directory of the test's) so the programs there still run.
    No braces: contained() formats the pod's mounts."""
    q_anchor, q_keep = shlex.quote(str(anchor)), shlex.quote(str(keep))
    return (
        f"mount --bind /usr/local {q_keep} && mount -t tmpfs tmpfs /usr/local"
        f' && for d in {q_keep}/*; do n=$(basename "$d") && mkdir "/usr/local/$n"'
        ' && mount --bind "$d" "/usr/local/$n"; done'
        f" && mkdir -p /usr/local/carve/lib && touch {ANCHOR_AT}"
        f" && mount --bind {q_anchor} {ANCHOR_AT} && mount -o remount,bind,ro {ANCHOR_AT}"
    )


@pytest.mark.parametrize("region", ["kept", "dropped"])
@pytest.mark.parametrize("plugins_file", [True, False], ids=["plugins-file", "environment-only"])
def test_a_childs_own_anchor_does_not_make_a_pod_volume_trusted(
    claim: Callable[..., Claim], tmp_path: Path, region: str, plugins_file: bool
) -> None:
    c, uuid = contained_claim(claim)
    pods = tmp_path / "evil" / "000-forged"  # a volume of the pod's, on the plugin's disk
    unlimited = ClaimLimits((DeviceLimit(0, 0, uuid=uuid),), "/x")
    write_limits(pods / "limits" / "limits", unlimited)  # mode 0444
    create_region(pods / "region", unlimited)
    mounts = (
        f"mkdir -p /run/carve/000-forged/limits && cp {pods}/region /run/carve/000-forged/"
        f" && mount --bind {pods}/limits /run/carve/000-forged/limits"
        " && mount -o remount,bind,ro /run/carve/000-forged/limits"
    )
    if plugins_file:
        anchor = tmp_path / "limits-source"
        anchor.write_text(limits_source(tmp_path / "claims") + "\n")  # what the plugin writes
        keep = tmp_path / "usr-local"
        keep.mkdir()
        mounts = f"{plugins_file_mounted(anchor, keep)} && {mounts}"
    env = {
        "CARVE_LIMITS_SOURCE": limits_source(tmp_path / "evil")
    }  # the child's own anchor: the pod's volume
    if region == "dropped":
        env["CARVE_REGION"] = ""
    out = contained(c, tmp_path, "pass", 9 * MIB, pod_mounts=mounts, **env)
    assert out.returncode == 0, out.stderr
    if plugins_file:
        assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the plugin's 8 MiB hold
    else:
        # with the environment alone (an older plugin, no file) the child's anchor is all there is: the
        # attack above is real, which is why the file is read first
        assert out.stdout.strip() == str(CUDA_SUCCESS), out.stderr


def test_the_plugins_file_anchors_the_plugins_own_mount(claim: Callable[..., Claim], tmp_path: Path) -> None:
    """The file, not the environment, names the plugin's mount: with no CARVE_LIMITS_SOURCE at all the
    plugin's 8 MiB are trusted over a tighter file of the pod's (4 MiB), so 6 MiB fit."""
    c, uuid = contained_claim(claim)
    pods = tmp_path / "pods" / "000-forged"
    tighter = ClaimLimits((DeviceLimit(4 * MIB, 0, uuid=uuid),), "/x")
    write_limits(pods / "limits" / "limits", tighter)
    create_region(pods / "region", tighter)
    anchor = tmp_path / "limits-source"
    anchor.write_text(limits_source(tmp_path / "claims") + "\n")
    keep = tmp_path / "usr-local"
    keep.mkdir()
    mounts = (
        f"{plugins_file_mounted(anchor, keep)}"
        f" && mkdir -p /run/carve/000-forged && cp -r {pods}/limits {pods}/region /run/carve/000-forged/"
    )
    out = contained(c, tmp_path, "pass", 6 * MIB, pod_mounts=mounts, CARVE_REGION="", CARVE_LIMITS_SOURCE="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(CUDA_SUCCESS), out.stderr
