"""What the driver counts for a claim whose memory it enforces: NVML's `currentUsed` of each container
cgroup the memory-limits hook recorded (<claim dir>/cgroups/<container id>, written by carve-cdi-hook).

Where the driver enforces, its count is the truth the metrics and the region watcher report: it covers
processes that never loaded the limiter and memory the limiter cannot see (contexts, unknown entry points).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pynvml

from driver.plugin.container.enforcement_edits import CGROUPS_DIR

MAX_RECORDS = 256  # containers of one claim; bounded because the directory is walked at every scrape
MAX_RECORD_BYTES = 4095  # the longest path Linux takes (PATH_MAX, 4096, less its NUL)


def recorded_cgroups(claim_dir: Path) -> list[str]:
    """The cgroup directories the hook set limits on for this claim's containers (sorted, bounded)."""
    out = []
    try:
        entries = sorted(Path(claim_dir, CGROUPS_DIR).iterdir())[:MAX_RECORDS]
    except OSError:
        return []
    for entry in entries:
        if entry.name.endswith(".tmp") or not entry.is_file() or entry.is_symlink():
            continue
        try:
            with entry.open("rb") as f:
                data = f.read(MAX_RECORD_BYTES + 1)  # one byte past the longest path: enough to refuse it
            text = data.decode()
        except (OSError, UnicodeDecodeError):
            continue
        # A longer record is no path (the hook writes its cgroup's, under PATH_MAX): skipped, not cut
        # short into a path that could name another cgroup, whose usage the claim would then report.
        if text.startswith("/") and len(data) <= MAX_RECORD_BYTES:
            out.append(text)
    return out


def driver_usage(claim_dir: Path, gpu_uuids: Iterable[str]) -> dict[str, int]:
    """GPU UUID -> bytes the driver counts for the claim's recorded cgroups (those with limits on it).

    Empty when the claim has no recorded cgroup; a GPU or cgroup the driver no longer knows (a container
    gone) counts nothing. NVML must be loaded (the plugin and the metrics exporter have it).
    """
    cgroups = recorded_cgroups(claim_dir)
    if not cgroups:
        return {}
    usage: dict[str, int] = {}
    for uuid in gpu_uuids:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError:
            continue
        for path in cgroups:
            limits = pynvml.c_nvmlGetMemoryLimits_v1_t()
            limits.nameSpace = path.encode()
            try:
                pynvml.nvmlDeviceGetMemoryLimits_v1(handle, limits)
            except pynvml.NVMLError:
                continue
            usage[uuid] = usage.get(uuid, 0) + limits.currentUsed
    return usage
