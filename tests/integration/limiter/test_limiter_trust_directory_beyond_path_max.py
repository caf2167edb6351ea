"""A limits directory whose canonical path does not fit PATH_MAX is not trusted: the limiter cannot tell its
mount point, so it cannot find its mountinfo entry (limits.c, mount_is_plugins: realpath failing is "not
the plugin's", never a pass).

Any process can make such a directory where it may write, and reach it by a short path through symlinks:
open() follows each link without a limit on the whole, while realpath() must spell the canonical path out
and fails with ENAMETOOLONG. Here the pod makes one on its writable /run (21 levels of 200-character
names), with a limits file naming the GPU without a limit on a read-only bind mount of its own (mode 0444,
the file's filesystem read-only: every other check passes), and links it into the regions root as
/run/carve/000-deep, named before the plugin's claim. Untrusted, the plugin's trusted file holds its GPU
at 8 MiB and 9 MiB do not fit; trusted, the pod's file would come first and lift the limit."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from limiter_harness import Claim
from test_limiter_escape import MIB, contained, contained_claim, forged_limits

CUDA_ERROR_OUT_OF_MEMORY = 2

# run as root in the namespace, before the process starts: {forged} is the pod's limits directory
MAKE_DEEP = """
import ctypes, errno, os, shutil, sys
libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
name = "d" * 200
os.makedirs("/run/deep")
os.chdir("/run/deep")
for level in range(21):  # relative steps: no path handed to the kernel is ever long
    os.mkdir(name)
    os.chdir(name)
    if level == 9:
        halfway = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
shutil.copytree("{forged}", "limits")
shutil.copy("{forged}/../region", "region")
# the limits directory read-only, a bind mount onto itself named relative to the deep working directory
if libc.mount(b"limits", b"limits", None, MS_BIND, None) or libc.mount(
    None, b"limits", None, MS_REMOUNT | MS_BIND | MS_RDONLY, None
):
    raise SystemExit("mount: " + os.strerror(ctypes.get_errno()))
# two links, each target far under PATH_MAX: /run/carve/000-deep -> level 10's "hop" -> the deepest level
os.symlink("/".join([name] * 11), "hop", dir_fd=halfway)
os.symlink("/run/deep/" + "/".join([name] * 10) + "/hop", "/run/carve/000-deep")
buf = ctypes.create_string_buffer(4096)
libc.realpath.restype = ctypes.c_char_p  # NULL is None
if libc.realpath(b"/run/carve/000-deep/limits", buf) is None:
    print("realpath:", errno.errorcode[ctypes.get_errno()], file=sys.stderr)
"""


def test_a_limits_directory_beyond_path_max_is_not_trusted(
    claim: Callable[..., Claim], tmp_path: Path
) -> None:
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 0)  # no memory limit, mode 0444 (write_limits)
    script = tmp_path / "make_deep.py"
    script.write_text(MAKE_DEEP.format(forged=forged))
    mounts = f'env -u LD_PRELOAD "{sys.executable}" "{script}"'
    out = contained(c, tmp_path, "pass", 9 * MIB, pod_mounts=mounts, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert "realpath: ENAMETOOLONG" in out.stderr, out.stderr  # the case meant: open works, realpath not
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the plugin's 8 MiB hold
