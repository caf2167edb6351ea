"""A CARVE_REGION without a directory (a bare file name) names a region in the working directory, and its
limits file is the working directory's limits/limits, as for any region <dir>/region (limits.c,
carve_limits_path: the directory of a name without a slash is "."). The limits file's quota then holds, not
the environment's (which asks for none here)."""

from __future__ import annotations

import subprocess

from limiter_harness import CLIENT

MIB = 1 << 20
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


def test_a_region_named_without_a_directory_takes_its_limits_from_the_working_directory(claim) -> None:
    c = claim().create(memory=8 * MIB)  # <dir>/region and <dir>/limits/limits
    assert c.region.name == "region" and c.limits == c.region.parent / "limits" / "limits"
    env = c.env(CARVE_REGION="region")  # run in <dir>
    results = []
    for nbytes in (4 * MIB, 16 * MIB):
        proc = subprocess.run(
            [str(CLIENT), "alloc", str(nbytes)],
            env=env,
            cwd=c.region.parent,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        results.append(proc.stdout.strip())
    # the limits file's 8 MiB: 4 MiB fit, 16 MiB do not
    assert results == [str(CUDA_SUCCESS), str(CUDA_ERROR_OUT_OF_MEMORY)]
