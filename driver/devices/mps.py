"""`mps`: one shareable device per GPU whose shares run as clients of the GPU's MPS server.

Published like `soft` (consumable `memory`, `cores`, `slots`), with type `mps` and `sharing: mps`.
Compute is partitioned by MPS itself (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from the share's `cores`): the
clients' kernels run concurrently on disjoint SM shares instead of time-slicing, which is what makes MPS the
lower-latency choice for many small inference processes (docs/devices.md). Memory is held by MPS's pinned
device memory limit, the limiter as a second line, and the driver's partition where the driver enforces.
MPS inside MIG devices is not modelled: an mps GPU runs with MIG off, like a soft one.
"""

from __future__ import annotations

from driver import names
from driver.devices.base import DeviceSet, ModelError, Settings
from driver.devices.soft import Soft
from driver.gpu.model import Gpu


class Mps:
    name = names.STRATEGY_MPS

    def check(self, gpu: Gpu) -> None:
        """Every GPU can run MPS; MIG mode is switched off for it as for soft (driver/plugin/mig/modes.py)."""

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        try:
            (soft,) = Soft().devices(gpu, settings).devices
        except ModelError as e:
            raise ModelError(str(e).replace(": soft:", ": mps:", 1)) from None
        attributes = dict(soft["attributes"])
        attributes["type"] = {"string": names.TYPE_MPS}
        attributes[names.SHARING_ATTRIBUTE] = {"string": "mps"}
        device = {**soft, "attributes": attributes}
        return DeviceSet(gpu=gpu, strategy=self.name, devices=(device,))
