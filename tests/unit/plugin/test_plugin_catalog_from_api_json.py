"""The catalog the plugin prepares from is built from the ResourceSlices the API server kept, read back as
JSON (the kubernetes client, the file cluster): every string in it is a fresh object, not the plugin's own
constant. A device's kind is its type's value, so a MIG device read back this way still gets a MIG instance,
a soft share, a slot or an MPS share still runs under the limiter, and a share whose memory the driver
enforces still says so."""

from __future__ import annotations

import json

from driver.plugin.claims.catalog import catalog_from_slices

SLICE = """
{"spec": {"devices": [
  {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "minor": {"int": 0}}},
  {"name": "gpu-1-mig-1g10gb-0", "attributes": {"type": {"string": "mig"}, "minor": {"int": 1}}},
  {"name": "gpu-2-vgpu-0", "attributes": {"type": {"string": "vgpu"}, "minor": {"int": 2},
                                          "memoryEnforcement": {"string": "driver"}}},
  {"name": "gpu-2-vgpu-1", "attributes": {"type": {"string": "vgpu"}, "minor": {"int": 2},
                                          "memoryEnforcement": {"string": "limiter"}}},
  {"name": "gpu-3-slot-0", "attributes": {"type": {"string": "slot"}, "minor": {"int": 3}}},
  {"name": "gpu-4-mps-0", "attributes": {"type": {"string": "mps"}, "minor": {"int": 4}}},
  {"name": "gpu-5-timeslice-0", "attributes": {"type": {"string": "timeslice"}, "minor": {"int": 5}}}
]}}
"""


def test_devices_read_back_from_json_keep_their_kind() -> None:
    catalog = catalog_from_slices([json.loads(SLICE)])
    kinds = {
        name: (d.is_mig, d.is_limited, d.is_mps, d.driver_enforced) for name, d in sorted(catalog.items())
    }
    assert kinds == {
        "gpu-0": (False, False, False, False),
        "gpu-1-mig-1g10gb-0": (True, False, False, False),
        "gpu-2-vgpu-0": (False, True, False, True),
        "gpu-2-vgpu-1": (False, True, False, False),
        "gpu-3-slot-0": (False, True, False, False),
        "gpu-4-mps-0": (False, True, True, False),
        "gpu-5-timeslice-0": (False, False, False, False),
    }
