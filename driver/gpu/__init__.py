"""GPU inventory: Gpu records read through pynvml (real NVML, or the fake library for `--gpus fake:...`).

model.py holds the records (pure); nvml.py reads them; mig.py creates and destroys MIG instances;
command.py is `carve inspect`. pynvml is imported only when inventory is actually read, so the pure
device model can use the records without it.
"""

from __future__ import annotations

from driver.gpu.model import Gpu, InventoryError, MigInstance, MigPlacement, MigProfile


def discover(gpus: str = "nvml", node_name: str | None = None) -> list[Gpu]:
    """Every GPU of this machine (`gpus="nvml"`) or of a fake topology (`gpus="fake:2xA100-80GB,1xT4"`)."""
    from driver.gpu.nvml import discover as _discover

    return _discover(gpus, node_name)


__all__ = ["Gpu", "InventoryError", "MigInstance", "MigPlacement", "MigProfile", "discover"]
