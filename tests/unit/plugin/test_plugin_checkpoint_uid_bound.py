"""A claim UID names the claim's files (its directory, its CDI spec), so the checkpoint takes one of at
most MAX_UID_BYTES (128) bytes: a record whose UID has exactly 128 bytes loads back whole, one of 129 makes
the checkpoint corrupt with the bound named (recovery then rebuilds from the claims directory)."""

from __future__ import annotations

from driver.plugin.state.checkpoint import (
    MAX_UID_BYTES,
    STATE_COMPLETED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
)


def _claim(uid: str) -> ClaimRecord:
    device = DeviceRecord(
        ["r"], "node-a", "gpu-0", "s-1", [f"k8s.gpu.carve.dev/claim={uid}-gpu-0"], "vgpu", "GPU-0"
    )
    return ClaimRecord(uid, "ns", "c", STATE_COMPLETED, [device], pods=["pod-1"])


def test_a_uid_of_exactly_the_bound_loads_back(tmp_path) -> None:
    uid = "u" * MAX_UID_BYTES
    Checkpoint(tmp_path / "checkpoint.json", "boot-1").save({uid: _claim(uid)})
    loaded = Checkpoint(tmp_path / "checkpoint.json", "boot-1").load()
    assert (loaded.status, loaded.claims) == ("ok", {uid: _claim(uid)})


def test_a_uid_one_byte_longer_is_corrupt(tmp_path) -> None:
    uid = "u" * (MAX_UID_BYTES + 1)
    Checkpoint(tmp_path / "checkpoint.json", "boot-1").save({uid: _claim(uid)})
    loaded = Checkpoint(tmp_path / "checkpoint.json", "boot-1").load()
    assert (loaded.status, loaded.claims) == ("corrupt", {})
    assert f"longer than {MAX_UID_BYTES} bytes" in loaded.detail
