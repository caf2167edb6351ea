"""Memory quota: every counted path charges and releases exactly, through direct calls, dlsym and
cuGetProcAddress; reports never exceed the quota nor underflow; OOM policies."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import PATHS

from driver.limits import ClaimLimits, DeviceLimit, Region, write_limits

MIB = 1 << 20


def run_python(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("mode", ["direct", "dlsym", "procaddr"])
def test_every_path_charges_releases_and_refuses_exactly(claim, mode):
    c = claim().create(memory=64 * MIB)
    out = c.run("paths", mode, CARVE_LOG="error", program=PATHS)
    assert f"paths {mode}: ok" in out.stdout


def test_procaddr_answers_that_are_not_the_drivers_exports_are_hooked_by_name_version_and_flags(claim):
    # a driver may hand out internal addresses: the limiter must still pick the hook of the same variant
    c = claim().create(memory=64 * MIB)
    out = c.run("paths", "procaddr", CARVE_LOG="error", CARVE_FAKE_PROCADDR_THUNKS="1", program=PATHS)
    assert "paths procaddr: ok" in out.stdout


def test_pitch_is_charged_at_the_drivers_pitch_not_the_estimate(claim):
    # the fake driver pads pitches to 2048 bytes here; the limiter's 512-byte estimate must be corrected
    c = claim().create(memory=64 * MIB)
    out = c.run("paths", "direct", CARVE_LOG="error", CARVE_FAKE_PITCH_ALIGN="2048", program=PATHS)
    assert "paths direct: ok" in out.stdout


def test_reports_show_the_quota_and_the_claims_usage(claim):
    c = claim().create(memory=64 * MIB)
    held = c.popen("hold", str(10 * MIB))
    try:
        assert held.stdout.readline().strip() == "ready 0"
        info = c.json("info")
    finally:
        held.kill()
        held.wait()
    assert info["total"] == 64 * MIB and info["device_total"] == 64 * MIB
    assert info["free"] == 54 * MIB
    assert (info["nvml_total"], info["nvml_used"], info["nvml_free"]) == (64 * MIB, 10 * MIB, 54 * MIB)
    assert (info["nvml2_total"], info["nvml2_used"], info["nvml2_free"]) == (64 * MIB, 10 * MIB, 54 * MIB)


def test_reports_clamp_at_zero_when_usage_exceeds_a_lowered_limit(claim):
    c = claim().create(memory=64 * MIB)
    held = c.popen("hold", str(40 * MIB))
    try:
        assert held.stdout.readline().strip() == "ready 0"
        # the plugin shrinks the quota under a running claim
        write_limits(c.limits, ClaimLimits((DeviceLimit(16 * MIB, 0),), str(c.region)))
        info = c.json("info")
    finally:
        held.kill()
        held.wait()
    assert info["cu_rc"] == 0 and info["free"] == 0 and info["total"] == 16 * MIB
    assert info["nvml_free"] == 0 and info["nvml_used"] == 40 * MIB and info["nvml2_free"] == 0


def test_without_a_limit_reports_pass_through(claim):
    c = claim().create(memory=0)
    info = c.json("info")
    assert info["total"] == 15360 * MIB and info["device_total"] == 15360 * MIB  # a whole T4
    assert info["nvml_total"] == 15360 * MIB


def test_python_ctypes_client_is_limited(claim):
    c = claim().create(memory=64 * MIB)
    script = textwrap.dedent(
        """
        import ctypes, json
        cuda = ctypes.CDLL("libcuda.so.1")
        ctx, dev = ctypes.c_void_p(), ctypes.c_int()
        assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
        assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
        ptrs, codes = [], []
        for _ in range(10):
            p = ctypes.c_uint64()
            rc = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(16 << 20))
            codes.append(rc)
            if rc == 0:
                ptrs.append(p)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        import pynvml
        pynvml.nvmlInit()
        mem = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
        for p in ptrs:
            cuda.cuMemFree_v2(p)
        print(json.dumps({"codes": codes, "free": free.value, "total": total.value,
                          "nvml": [mem.total, mem.used, mem.free]}))
        """
    )
    out = run_python(script, c.env())
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["codes"] == [0, 0, 0, 0, 2, 2, 2, 2, 2, 2]  # 4 x 16 MiB fit, then CUDA_ERROR_OUT_OF_MEMORY
    assert (res["free"], res["total"]) == (0, 64 * MIB)
    assert res["nvml"] == [64 * MIB, 64 * MIB, 0]
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 0 and r.oom_refusals(0) == 6


def test_refusals_are_logged_once_per_process_and_counted(claim):
    c = claim().create(memory=8 * MIB)
    script = "import ctypes; c=ctypes.CDLL('libcuda.so.1'); x=ctypes.c_void_p(); d=ctypes.c_int(); " \
        "c.cuInit(0); c.cuDeviceGet(ctypes.byref(d),0); c.cuDevicePrimaryCtxRetain(ctypes.byref(x),d); " \
        "c.cuCtxSetCurrent(x); p=ctypes.c_uint64(); " \
        "print([c.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(9<<20)) for _ in range(5)])"
    out = run_python(script, c.env())
    assert out.stdout.strip() == "[2, 2, 2, 2, 2]"
    assert out.stderr.count("refused") == 1
    with Region.open(c.region) as r:
        assert r.oom_refusals(0) == 5


def test_oom_policy_kill_kills_the_allocating_process(claim):
    c = claim().create(memory=8 * MIB, oom_policy="kill")
    proc = c.run("alloc", str(9 * MIB), check=False)
    assert proc.returncode == -9
    assert "CARVE_OOM_POLICY=kill" in proc.stderr


def test_each_visible_device_has_its_own_quota(claim):
    c = claim(gpus="2xT4")  # no region file: per-device limits from the environment
    script = textwrap.dedent(
        """
        import ctypes
        cuda = ctypes.CDLL("libcuda.so.1")
        cuda.cuInit(0)
        out = []
        for ordinal in (0, 1):
            ctx, dev, p = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint64()
            cuda.cuDeviceGet(ctypes.byref(dev), ordinal)
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
            cuda.cuCtxSetCurrent(ctx)
            out.append(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(9 << 20)))
        print(out)
        """
    )
    out = run_python(script, c.env(CARVE_MEMORY_LIMIT_1=str(8 * MIB), CARVE_MEMORY_LIMIT=str(16 * MIB)))
    assert out.stdout.strip() == "[0, 2]", out.stderr


def test_an_array_call_without_its_handle_or_descriptor_gets_the_drivers_error_and_charges_nothing(claim):
    c = claim().create(memory=64 * MIB)
    script = textwrap.dedent(
        """
        import ctypes, json
        cuda = ctypes.CDLL("libcuda.so.1")
        ctx, dev = ctypes.c_void_p(), ctypes.c_int()
        cuda.cuInit(0)
        cuda.cuDeviceGet(ctypes.byref(dev), 0)
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        cuda.cuCtxSetCurrent(ctx)
        desc = (ctypes.c_size_t * 8)(1024, 1024, 0, 0, 0, 0, 0, 0)  # a descriptor's room, never read here
        handle = ctypes.c_void_p()
        codes = []
        calls = (("cuArrayCreate_v2", ()), ("cuArray3DCreate_v2", ()), ("cuMipmappedArrayCreate", (1,)))
        for name, args in calls:
            fn = getattr(cuda, name)
            codes.append([fn(None, desc, *args), fn(ctypes.byref(handle), None, *args)])
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        print(json.dumps({"codes": codes, "free": free.value}))
        """
    )
    out = run_python(script, c.env())
    assert out.returncode == 0, out.stderr  # no crash
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res == {"codes": [[1, 1]] * 3, "free": 64 * MIB}, res  # CUDA_ERROR_INVALID_VALUE, nothing charged


def test_nvmls_v2_report_alone_is_clamped_to_the_quota(claim):
    # a monitoring process that asks NVML's v2 memory report first, with no other NVML or CUDA call before
    c = claim().create(memory=8 * MIB)
    out = c.json("nvml2")
    assert out == {"rc": 0, "total": 8 * MIB, "used": 0, "free": 8 * MIB, "reserved": 0}, out
