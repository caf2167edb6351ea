"""NVML health signals through pynvml: XID events of an event set, and the level signals (GPU lost,
ECC pages or rows pending) read per GPU. NVML must be loaded (driver/gpu/nvml.py `load`) first.

Only values leave this module (`XidEvent`, `Signals`); the health policy (driver/plugin/health/policy.py)
decides what they mean.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pynvml

# What the monitor asks for: XIDs, and the ECC events NVIDIA's DRA driver registers too (so a driver that
# reports them as XIDs 48/63/64 on one GPU and only as ECC events on another is covered).
EVENT_MASK = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypeSingleBitEccError
)


@dataclass(frozen=True)
class XidEvent:
    uuid: str
    xid: int


@dataclass(frozen=True)
class Signals:
    """A GPU's level signals now; `error` is set when NVML could not answer (other than 'lost')."""

    lost: bool = False
    pages_pending: bool = False
    error: str = ""


class WaitLost(Exception):
    """nvmlEventSetWait answered GPU_IS_LOST: some registered GPU fell off the bus (probe them)."""


class WaitFailed(Exception):
    """nvmlEventSetWait failed otherwise (NVML_ERROR_UNKNOWN and the like)."""


def _lost(e: pynvml.NVMLError) -> bool:
    return isinstance(e, pynvml.NVMLError_GpuIsLost)


def probe(uuid: str) -> Signals:
    """GPU lost (no handle, or memory info answers GPU_IS_LOST) and pending retirement/remapping."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        pynvml.nvmlDeviceGetMemoryInfo(handle)
    except pynvml.NVMLError as e:
        return Signals(lost=True) if _lost(e) else Signals(error=f"{type(e).__name__}: {e}")
    pending = False
    try:  # Ampere and newer: row remapping
        _, _, is_pending, _ = pynvml.nvmlDeviceGetRemappedRows(handle)
        pending = bool(is_pending)
    except pynvml.NVMLError as e:
        if _lost(e):
            return Signals(lost=True)
        try:  # older GPUs: page retirement
            pending = pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError as e2:
            if _lost(e2):
                return Signals(lost=True)
            # NOT_SUPPORTED on both (MIG with live instances, old boards): no signal, not an error.
    return Signals(pages_pending=pending)


class EventSet:
    """One NVML event set over the given GPUs; `wait` returns one XID event or None at the timeout."""

    def __init__(self) -> None:
        self._set = pynvml.nvmlEventSetCreate()
        self._lock = threading.Lock()
        self._closed = False

    def register(self, uuid: str) -> str:
        """Register a GPU; '' when done, else why not ('lost' for a lost GPU)."""
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
            pynvml.nvmlDeviceRegisterEvents(handle, EVENT_MASK & supported, self._set)
        except pynvml.NVMLError as e:
            return "lost" if _lost(e) else f"{type(e).__name__}: {e}"
        return ""

    def wait(self, timeout_ms: int) -> XidEvent | None:
        try:
            data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
        except pynvml.NVMLError_Timeout:
            return None
        except pynvml.NVMLError as e:
            if _lost(e):
                raise WaitLost(str(e)) from None
            raise WaitFailed(f"{type(e).__name__}: {e}") from None
        if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
            return None  # an ECC count event: the level probe reads what it left behind
        try:
            uuid = pynvml.nvmlDeviceGetUUID(data.device)
        except pynvml.NVMLError as e:
            raise WaitFailed(f"event for an unknown device: {e}") from None
        return XidEvent(uuid if isinstance(uuid, str) else uuid.decode(), int(data.eventData))

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                pynvml.nvmlEventSetFree(self._set)
