"""A claim's memory quota larger than its GPU (the plugin's shares are rounded, an admin's claim may ask for
more than a smaller model has) never makes the GPU look bigger: CUDA's cuMemGetInfo, cuDeviceTotalMem and
NVML's memory reports give the smaller of the quota and the GPU's own memory, so a framework sizing its cache
from them (PyTorch, vLLM's gpu_memory_utilization) asks for no more than the card has (report.c)."""

from __future__ import annotations

GIB = 1 << 30


def test_a_quota_above_the_gpus_memory_reports_the_gpus(claim):
    gpu = claim("probe").json("info", LD_PRELOAD="")  # the fake T4 without the limiter
    c = claim().create(memory=64 * GIB)
    out = c.json("info")
    assert gpu["total"] < 64 * GIB
    assert out["cu_rc"] == 0 and out["total"] == gpu["total"], (out, gpu)
    assert out["device_total_rc"] == 0 and out["device_total"] == gpu["device_total"], (out, gpu)
    assert out["nvml_rc"] == 0 and out["nvml_total"] == gpu["nvml_total"], (out, gpu)
    assert out["nvml2_rc"] == 0 and out["nvml2_total"] == gpu["nvml2_total"], (out, gpu)
