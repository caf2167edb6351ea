"""NVML's memory report: a GPU no claim limits reports what the driver says, and a limited one follows the
claim's limits when the plugin rewrites them while the process runs, as CUDA's does: a monitoring agent in
the container (nvidia-smi, pynvml, a DCGM exporter) polls NVML for the life of the process, and a quota the
plugin changed must show there too, not the one of its first call.

The process asks NVML once (the limiter resolves the handle then) and launches a kernel (which starts the
limiter's feedback thread), the test rewrites the limits file, the process waits until CUDA's cuMemGetInfo
shows the new quota (the feedback thread has applied it: no timing is asserted) and asks NVML again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import CUDA_CONTEXT, write_claim

from driver.limits import ClaimLimits, DeviceLimit, write_limits

MIB = 1 << 20

SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    """
    import json, sys, time
    import pynvml
    pynvml.nvmlInit()

    def report():
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        return {"cuda": total.value, "nvml": v1.total, "nvml2": v2.total}

    print(json.dumps(report()), flush=True)
    # a launch starts the limiter's feedback thread, which re-reads the limits file at each tick
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    kernel = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1000)))
    assert cuda.cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, None, None, None) == 0
    assert cuda.cuCtxSynchronize() == 0
    want = int(sys.stdin.readline())  # the test has rewritten the limits file
    deadline = time.monotonic() + 60
    while report()["cuda"] != want and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps(report()), flush=True)
    """
)


def test_nvmls_report_follows_a_rewritten_quota(claim):
    c = claim(gpus="1xA100-80GB")
    uuid = json.loads(c.run("uuids").stdout)[0]

    def limits(memory: int, **kw: str) -> ClaimLimits:
        # named by UUID, as the plugin writes it: NVML's handle is bound through the UUID
        return ClaimLimits(devices=(DeviceLimit(memory, 0, uuid=uuid),), region_path=str(c.region), **kw)

    write_claim(c.region, limits(8 * MIB))
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env=c.env(CARVE_TICK_MS="10"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(proc.stdout.readline()) == {"cuda": 8 * MIB, "nvml": 8 * MIB, "nvml2": 8 * MIB}
        c.limits.unlink()
        write_limits(c.limits, limits(16 * MIB))
        proc.stdin.write(f"{16 * MIB}\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"cuda": 16 * MIB, "nvml": 16 * MIB, "nvml2": 16 * MIB}
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


REPORTS = textwrap.dedent(
    """
    import json
    import pynvml
    pynvml.nvmlInit()
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        out.append([v1.total, v1.free, v2.total, v2.free, v2.reserved])
    print(json.dumps(out))
    """
)


def test_a_gpu_no_claim_limits_reports_what_the_driver_says(claim):
    c = claim(gpus="2xT4").create(memory=8 * MIB)  # the claim's limits name one device: ordinal 0

    def reports(preload: bool) -> list[list[int]]:
        proc = subprocess.run(
            [sys.executable, "-c", REPORTS],
            env=c.env(preload=preload),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    driver, limited = reports(preload=False), reports(preload=True)
    assert limited[0][0] == limited[0][2] == 8 * MIB
    assert limited[1] == driver[1] and driver[1][0] > 8 * MIB
