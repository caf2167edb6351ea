"""A region the limiter creates from the environment (CARVE_REGION names a file that is not there) is
written whole under a temporary name and only then linked into place (region.c, create_file): a write that
stops short is written on, and a write that fails leaves no region at the path. A truncated file linked
there would be refused by every process of the claim after this one (a region of another size), instead
of being created by the next.

The process runs with its file size limited to one page (RLIMIT_FSIZE, SIGXFSZ ignored, so the write past
it fails with EFBIG instead of killing it): its first write stops at 4,096 bytes, the next fails. The
environment's quota then holds for the process alone, and nothing is left at the path."""

from __future__ import annotations

import resource
import signal
import subprocess
from pathlib import Path

from limiter_harness import CLIENT

MIB = 1 << 20
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2


def one_page_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # kept across exec: the write fails with EFBIG instead


def test_a_region_that_cannot_be_written_whole_is_not_left_at_its_path(claim, tmp_path: Path) -> None:
    c = claim()
    region = tmp_path / "new" / "region"
    region.parent.mkdir()
    env = c.env(CARVE_REGION=str(region), CARVE_MEMORY_LIMIT=str(8 * MIB))
    for size, rc in ((9 * MIB, CUDA_ERROR_OUT_OF_MEMORY), (7 * MIB, CUDA_SUCCESS)):
        proc = subprocess.run(
            [str(CLIENT), "alloc", str(size)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=one_page_files,
        )
        assert proc.stdout.strip() == str(rc), proc.stderr  # the environment's 8 MiB, per process
        assert f"region {region}: cannot open or create" in proc.stderr, proc.stderr
        assert list(region.parent.iterdir()) == [], list(region.parent.iterdir())  # no region, no temporary
