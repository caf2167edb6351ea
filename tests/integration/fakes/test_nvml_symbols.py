"""The fake NVML exports every function nvml.h declares (cuda-runtime-facts.md §6, §8).

PyTorch's driver-API wrapper asserts that the NVML names it uses resolve, and torch.cuda.device_count()
counts GPUs through the unversioned nvmlInit; what the fake does not emulate answers NOT_SUPPORTED.
"""

from __future__ import annotations

import re
import subprocess
import sys

from fakes_support import NATIVE

GEN = NATIVE / "fakes" / "gen_nvml_symbols.py"
TABLE = NATIVE / "fakes" / "nvml" / "symbols_gen.h"
NOT_SUPPORTED = 3


def test_generated_name_list_is_current():
    """Every function the installed nvml.h declares is in the committed list (another nvidia-nvml-dev may
    declare fewer: a list generated from newer headers is still current)."""
    proc = subprocess.run([sys.executable, str(GEN)], capture_output=True, text=True, check=True)
    installed = set(re.findall(r"X\((nvml\w+)\)", proc.stdout))
    assert len(installed) > 400
    assert installed <= set(re.findall(r"X\((nvml\w+)\)", TABLE.read_text())), (
        "native/fakes/nvml/symbols_gen.h is stale: python3 native/fakes/gen_nvml_symbols.py > "
        "native/fakes/nvml/symbols_gen.h")


def test_every_declared_function_is_exported(fake_run):
    names = re.findall(r"X\((nvml\w+)\)", TABLE.read_text())
    assert len(names) > 400 and "nvmlInit" in names and "nvmlDeviceGetNvLinkRemoteDeviceType" in names
    result = fake_run(f"""
        names = {names!r}
        out([n for n in names if not hasattr(LIB, n)])
        """)
    assert result == []


def test_unemulated_functions_answer_not_supported_and_v1_init_counts(fake_run):
    result = fake_run("""
        from ctypes import byref, c_uint, c_void_p, c_int
        n = c_uint()
        res = {"init": LIB.nvmlInit(), "count": LIB.nvmlDeviceGetCount_v2(byref(n)), "n": n.value}
        h = c_void_p()
        res["handle_v1"] = LIB.nvmlDeviceGetHandleByIndex(1, byref(h))
        res["count_v1"] = LIB.nvmlDeviceGetCount(byref(n))
        t = c_int()
        # names PyTorch's driver-API wrapper resolves (c10/cuda/driver_api)
        res["remote_type"] = LIB.nvmlDeviceGetNvLinkRemoteDeviceType(h, 0, byref(t))
        res["fabric"] = LIB.nvmlDeviceGetGpuFabricInfoV(h, None)
        res["power"] = LIB.nvmlDeviceGetPowerUsage(h, byref(n))
        LIB.fake_mem_reserve(1, os.getpid(), 5 << 20)
        class V1(ctypes.Structure):
            _fields_ = [("pid", c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
        procs, n = (V1 * 4)(), c_uint(4)
        res["procs_v1"] = LIB.nvmlDeviceGetComputeRunningProcesses(h, byref(n), procs)
        res["procs"] = [[p.pid, p.usedGpuMemory] for p in procs[:n.value]]
        res["pid"] = os.getpid()
        out(res)
        """, gpus="2xA100-80GB")
    assert result["init"] == 0 and result["count"] == 0 and result["n"] == 2
    assert result["handle_v1"] == 0 and result["count_v1"] == 0
    assert result["remote_type"] == NOT_SUPPORTED
    assert result["fabric"] == NOT_SUPPORTED
    assert result["power"] == NOT_SUPPORTED
    assert result["procs_v1"] == 0 and result["procs"] == [[result["pid"], 5 << 20]]
