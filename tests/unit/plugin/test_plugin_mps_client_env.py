"""What an MPS claim's container is told (container/enforcement_edits.py, mps_edits), as NVIDIA's
MPS documents the variables: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is the share's cores, and 100 (all SMs) for a
share without a compute limit (cores 0) or one of the whole GPU; CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is
`<ordinal>=<MiB>M`, at least 1 MiB; the pipe directory is mounted read-only."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.plugin.container.enforcement_edits import MpsShare, mps_edits


def _env(**kw) -> dict[str, str]:
    share = MpsShare(
        pipe_dir=Path("/var/lib/carve/mps/gpu-0/pipe"), **{"ordinal": 0, "memory": 4 << 30, **kw}
    )
    return dict(e.split("=", 1) for e in mps_edits(share).env)


@pytest.mark.parametrize(("cores", "pct"), [(30, "30"), (1, "1"), (99, "99"), (0, "100"), (100, "100")])
def test_the_thread_percentage_is_the_shares_cores_or_all_sms(cores, pct):
    assert _env(cores=cores)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == pct


@pytest.mark.parametrize(
    ("ordinal", "memory", "limit"), [(0, 4 << 30, "0=4096M"), (2, 3 << 20, "2=3M"), (1, 1, "1=1M")]
)
def test_the_pinned_memory_limit_is_per_ordinal_in_mib(ordinal, memory, limit):
    assert _env(cores=30, ordinal=ordinal, memory=memory)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == limit


def test_the_pipe_directory_is_mounted_read_only():
    (pipe, *_) = mps_edits(MpsShare(Path("/host/pipe"), 0, 30, 1 << 30)).mounts
    assert pipe.host_path == "/host/pipe" and pipe.options[0] == "ro"
