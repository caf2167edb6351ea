"""CARVE_LIMITS_SOURCE when the claims directory is under the plugin's run directory (--run-dir, a tmpfs such
as /run) and the plugin directory is on another mount: the run directory's own mount decides, not the
plugin directory's, and not the claims' region tmpfs mounts below it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from driver.limits.mounts import limits_source

REPO = Path(__file__).resolve().parents[3]

# The plugin container's mountinfo as the kernel writes it under the chart: the plugin directory bind-mounted
# from the host's ext4, the run directory from the host's /run tmpfs (its root: the path inside that tmpfs),
# and two claims' region tmpfs mounts below the claims directory.
PLUGIN_POD_MOUNTINFO = """\
1200 1100 0:310 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
1210 1200 259:2 /var/lib/kubelet/plugins/gpu.carve.dev /var/lib/kubelet/plugins/gpu.carve.dev rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
1211 1200 0:26 /carve/gpu.carve.dev /run/carve/gpu.carve.dev rw,nosuid,nodev,noexec,relatime shared:13 - tmpfs tmpfs rw,size=6553600k,mode=755
1212 1200 0:26 /cdi /var/run/cdi rw,nosuid,nodev,noexec,relatime shared:13 - tmpfs tmpfs rw,size=6553600k,mode=755
1250 1211 0:90 / /run/carve/gpu.carve.dev/claims/u1/region rw,relatime shared:40 - tmpfs carve-region rw,size=264k
1251 1211 0:91 / /run/carve/gpu.carve.dev/claims/u2/region rw,relatime shared:41 - tmpfs carve-region rw,size=264k
"""  # noqa: E501 (mountinfo lines are as long as the kernel writes them)


def test_the_run_dirs_tmpfs_names_the_claims_directory_not_the_plugin_dirs_disk(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(PLUGIN_POD_MOUNTINFO)
    # What a tenant container's bind mount of <claims>/<uid>/limits shows: the host's /run tmpfs (0:26),
    # root /carve/gpu.carve.dev/claims/<uid>/limits. The source must name that, not the ext4 of the plugin
    # directory nor a region tmpfs (mounted below the claims directory, never above it).
    assert limits_source("/run/carve/gpu.carve.dev/claims", info) == "0:26:/carve/gpu.carve.dev/claims"
    # Claims an older plugin prepared under the plugin directory keep theirs (their containers have it).
    assert (
        limits_source("/var/lib/kubelet/plugins/gpu.carve.dev/claims", info)
        == "259:2:/var/lib/kubelet/plugins/gpu.carve.dev/claims"
    )
    # A region's own tmpfs is its own source: never the claims directory's.
    assert limits_source("/run/carve/gpu.carve.dev/claims/u1/region", info) == "0:90:/"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_the_source_of_a_run_dir_tmpfs_is_the_device_the_kernel_reports(tmp_path):
    # In a private mount namespace: the plugin directory on the test's filesystem, the run directory a tmpfs
    # of its own with a region tmpfs mounted in one claim's directory. The source computed from the real
    # mountinfo names the device stat() gives the claims directory (what the limiter compares), and differs
    # from the plugin directory's.
    script = (
        "import os, sys\n"
        "from driver.limits.mounts import limits_source\n"
        "claims, plugin = sys.argv[1], sys.argv[2]\n"
        "st, sp = os.stat(claims), os.stat(plugin)\n"
        "print(limits_source(claims), f'{os.major(st.st_dev)}:{os.minor(st.st_dev)}',\n"
        "      limits_source(plugin), f'{os.major(sp.st_dev)}:{os.minor(sp.st_dev)}')\n"
    )
    plugin = tmp_path / "plugin" / "claims"
    plugin.mkdir(parents=True)
    run = tmp_path / "run"
    run.mkdir()
    region = run / "carve" / "claims" / "u1" / "region"
    cmd = (
        f"mount -t tmpfs carve-run {run} && mkdir -p {region} && "
        f"mount -t tmpfs -o size=264k carve-region {region} && "
        f"exec {sys.executable} -c {shlex.quote(script)} {run / 'carve' / 'claims'} {plugin}"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    source, device, plugin_source, plugin_device = out.stdout.split()
    assert source == f"{device}:/carve/claims", (source, device)  # the run tmpfs's root, then the path
    assert plugin_source.startswith(plugin_device + ":") and device != plugin_device
