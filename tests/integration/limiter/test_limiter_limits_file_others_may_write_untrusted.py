"""A limits file that someone besides its owner may write is not trusted, even on the plugin's own read-only
mount (limits.c, carve_limits_read: `!(st.st_mode & (S_IWGRP | S_IWOTH))`). The plugin writes it 0444; a
mode that lets a group or every uid write it means the file on the host could have been written by another
than the plugin, whatever the mount the container sees says.

Untrusted, it is one limits file among the others: the tightest of them holds for the GPU. The pod brings
its own limits directory naming the GPU with 4 MiB, the plugin's file says 8 MiB, and the process
allocates 6 MiB: it fits only where the plugin's file is trusted (its mode 0444, as
test_limiter_escape.py's `test_the_plugins_own_mount_is_trusted_over_a_tighter_file_of_the_pods` shows)."""

from __future__ import annotations

import shlex

import pytest
from test_limiter_escape import MIB, UID, contained, contained_claim, forged_limits

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (0o444, CUDA_SUCCESS),  # as the plugin writes it: trusted, its 8 MiB hold
        (0o644, CUDA_SUCCESS),  # its owner (root, the plugin) may write it: still trusted
        (0o464, CUDA_ERROR_OUT_OF_MEMORY),  # its group may write it
        (0o446, CUDA_ERROR_OUT_OF_MEMORY),  # every uid may write it
    ],
    ids=["0444", "0644", "0464", "0446"],
)
def test_the_plugins_limits_file_is_trusted_only_when_no_one_else_may_write_it(
    claim, tmp_path, mode: int, expected: int
) -> None:
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    plugins_file = tmp_path / "claims" / UID / "limits" / "limits"  # written by `contained`, on the host
    # run in the namespace before the process starts: the pod's own writable limits directory, and the
    # plugin's file given `mode` on the host (the container's read-only mount of it shows the same inode)
    setup = (
        f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
        f" && chmod {mode:o} {shlex.quote(str(plugins_file))}"
    )
    out = contained(c, tmp_path, "pass", 6 * MIB, pod_mounts=setup, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(expected), out.stderr
