"""A MIG device published without a GPU minor (no 'minor' attribute, a name that is not gpu-<n>...) fails
its prepare saying the minor is unknown, whatever capability files the proc root holds: it never takes
another GPU's capability nodes, and the error does not name a made-up gpu<n> directory. The same device
with its minor published (0 as any other) gets its GPU's nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.plugin.claims.catalog import device_from_slice
from driver.plugin.container.edits import DriverFilesError, HostLayout
from driver.plugin.mig.caps import access_paths


def _proc(root: Path) -> Path:
    """Capability files for GPU instance 1 / compute instance 0 on GPUs 0 and 1 (minor 30 + 2g, 31 + 2g)."""
    root.mkdir(parents=True)
    (root / "devices").write_text("Character devices:\n195 nvidia\n238 nvidia-caps\n")
    for gpu in (0, 1):
        gi, ci = access_paths(root, gpu, 1, 0)
        ci.parent.mkdir(parents=True)
        gi.write_text(f"DeviceFileMinor: {30 + 2 * gpu}\n")
        ci.write_text(f"DeviceFileMinor: {31 + 2 * gpu}\n")
    return root


def _mig_device(attributes: dict) -> dict:
    return {"name": "mig-1g.10gb-a", "attributes": {"type": {"string": "mig"}, **attributes}}


def test_a_mig_device_without_a_minor_fails_saying_so(tmp_path: Path) -> None:
    layout = HostLayout.scan(tmp_path / "empty", _proc(tmp_path / "proc"), driver_required=False)
    unknown = device_from_slice(_mig_device({}))
    with pytest.raises(DriverFilesError) as e:
        layout.mig_nodes(unknown.minor, 1, 0)
    assert str(e.value) == (
        "MIG capability nodes of gi1/ci0: the device's GPU minor number is unknown (no 'minor' attribute)"
    )
    for minor in (0, 1):  # minor 0 is a GPU's too
        known = device_from_slice(_mig_device({"minor": {"int": minor}}))
        paths = [n.path for n in layout.mig_nodes(known.minor, 1, 0)]
        caps = (30 + 2 * minor, 31 + 2 * minor)
        assert paths == [f"/dev/nvidia-caps/nvidia-cap{c}" for c in caps]
