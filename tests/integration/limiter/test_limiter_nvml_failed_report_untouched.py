"""A memory report NVML refuses is passed back untouched (report.c): the limiter writes the claim's quota
into NVML's answer only when NVML has answered. nvmlDeviceGetMemoryInfo_v2 with a struct of the wrong
version fails (NVML_ERROR_ARGUMENT_VERSION_MISMATCH) without writing it; a caller that checks the result
and retries with the right version must not find the quota written into a struct NVML never filled.
nvmlDeviceGetMemoryInfo (v1) takes no version: it fails for a GPU that fell off the bus
(NVML_ERROR_GPU_IS_LOST, the fake's CARVE_FAKE_LOST_FILE), and a monitor that reads the struct anyway must
find what it put there, not the quota."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

MIB = 1 << 20
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_GPU_IS_LOST = 15
SENTINEL = 0x5EED

SCRIPT = textwrap.dedent(
    f"""
    import ctypes, json
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.c_nvmlMemory_v2_t()
    m.version = 0  # not nvmlMemory_v2
    m.total = m.free = m.used = m.reserved = {SENTINEL}
    rc = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")(h, ctypes.byref(m))
    print(json.dumps({{"rc": rc, "fields": [m.total, m.free, m.used, m.reserved]}}))
    """
)


def test_a_memory_report_nvml_refused_is_not_clamped(claim):
    c = claim().create(memory=64 * MIB)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=c.env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rc"] == NVML_ERROR_ARGUMENT_VERSION_MISMATCH, out
    assert out["fields"] == [SENTINEL] * 4, out


# v1 on GPU 0, which the lost file names: the limiter binds the handle (the claim's device) all the same
LOST_SCRIPT = textwrap.dedent(
    f"""
    import ctypes, json
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.c_nvmlMemory_t()
    m.total = m.free = m.used = {SENTINEL}
    rc = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo")(h, ctypes.byref(m))
    print(json.dumps({{"rc": rc, "fields": [m.total, m.free, m.used]}}))
    """
)


def test_a_memory_report_of_a_lost_gpu_is_not_clamped(claim, tmp_path: Path):
    c = claim().create(memory=64 * MIB)
    lost = tmp_path / "lost"
    lost.write_text("0\n")
    proc = subprocess.run(
        [sys.executable, "-c", LOST_SCRIPT],
        env=c.env(CARVE_FAKE_LOST_FILE=str(lost)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rc"] == NVML_ERROR_GPU_IS_LOST, out
    # clamped, total would read the 64 MiB quota and free 64 MiB less the sentinel used
    assert out["fields"] == [SENTINEL] * 3, out
