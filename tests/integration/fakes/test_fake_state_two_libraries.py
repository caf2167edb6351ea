"""The fake libcuda and the fake NVML share one state file; both may create it at once inside one process.

That happens under the limiter: its NVML thread starts while the CUDA runtime initialises the driver. Each
library opens the state on its own descriptor, so its locks must exclude the other library's (process record
locks did not: the second one could truncate the new file under the first one's mapping, a SIGBUS seen in 2-4
of 16 real-cudart runs). This test checks the outcome (no crash, one state both libraries see); the window is
too short to hit reliably from here, so it does not prove the old race by itself (native/fakes/common/state.c,
file_lock, says why the locks are open-file-description locks).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FAKE_LIB_DIR = Path(__file__).resolve().parents[3] / "native" / "build" / "fakes"

RACE = r"""
import ctypes, sys, threading
cuda = ctypes.CDLL(sys.argv[1] + "/libcuda.so.1")
nvml = ctypes.CDLL(sys.argv[1] + "/libnvidia-ml.so.1")
go = threading.Barrier(2)
rc = {}
def run(name, fn):
    go.wait()
    rc[name] = fn()
threads = [threading.Thread(target=run, args=("cuda", lambda: cuda.cuInit(0))),
           threading.Thread(target=run, args=("nvml", lambda: nvml.nvmlInit_v2()))]
for t in threads: t.start()
for t in threads: t.join()
count = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value == 2, count.value
free, total = ctypes.c_size_t(), ctypes.c_size_t()
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
assert cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0 and total.value > 0
ptr = ctypes.c_uint64()
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)) == 0
class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
handle, mem = ctypes.c_void_p(), Memory()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
assert nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == 0
# One state: NVML sees what CUDA allocated (a library that lost the race would keep a private state).
assert mem.used >= 1 << 30, mem.used
print(rc["cuda"], rc["nvml"])
"""


def test_both_fake_libraries_create_one_state_file_at_once(fake_gpu_env, tmp_path: Path):
    for attempt in range(48):  # the window is short: a fresh file per attempt
        env = fake_gpu_env("2xA100-80GB", state=tmp_path / f"state-{attempt}")
        out = subprocess.run([sys.executable, "-c", RACE, str(FAKE_LIB_DIR)], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, (attempt, out.returncode, out.stderr[-2000:])
        assert out.stdout.split() == ["0", "0"], out.stdout
