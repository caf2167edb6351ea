"""How much of the GPU's SM time this process used, on the fake GPUs and on real ones.

On the fake GPUs the fake driver keeps the time its modelled kernels occupy (`fake_now_ns`,
`fake_utilization` in native/fakes/common/kernels.c, exported by the fake libcuda.so.1). On a real GPU
NVML's per-process samples (`nvmlDeviceGetProcessUtilization`) give the same figure, averaged over the
samples taken since the start. Either way the figure is the driver's, never the limiter's own count.
"""

from __future__ import annotations

import ctypes
import os
import time


class Sample(ctypes.Structure):
    """nvmlProcessUtilizationSample_t"""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("timeStamp", ctypes.c_ulonglong),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
    ]


class Occupancy:
    def __init__(self, ordinal: int = 0) -> None:
        self.ordinal = ordinal
        cuda = ctypes.CDLL("libcuda.so.1")
        self.fake = hasattr(cuda, "fake_utilization")
        if self.fake:
            self._now = cuda.fake_now_ns
            self._now.restype = ctypes.c_uint64
            self._util = cuda.fake_utilization
            self._util.restype = ctypes.c_uint
            self._util.argtypes = (ctypes.c_uint, ctypes.c_int, ctypes.c_uint64)
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            self.gpu = int(visible.split(",")[0]) if visible[:1].isdigit() else ordinal
        else:  # ctypes, not pynvml: the framework environment holds only the pinned CUDA wheels
            self._nvml = ctypes.CDLL("libnvidia-ml.so.1")
            self._handle = ctypes.c_void_p()
            if self._nvml.nvmlInit_v2() or self._nvml.nvmlDeviceGetHandleByIndex_v2(
                ordinal, ctypes.byref(self._handle)
            ):
                raise RuntimeError("NVML did not start")

    def start(self) -> object:
        return self._now() if self.fake else int(time.time() * 1e6)

    def percent(self, since: object) -> float:
        """SM occupancy of this process since `start()`, in percent."""
        if self.fake:
            return float(self._util(self.gpu, os.getpid(), since))
        count = ctypes.c_uint(256)
        samples = (Sample * 256)()
        rc = self._nvml.nvmlDeviceGetProcessUtilization(
            self._handle, samples, ctypes.byref(count), ctypes.c_ulonglong(since)
        )
        if rc:
            return -1.0
        mine = [s.smUtil for s in samples[: count.value] if s.pid == os.getpid()]
        return sum(mine) / len(mine) if mine else 0.0
