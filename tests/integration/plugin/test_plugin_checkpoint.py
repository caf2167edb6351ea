"""The checkpoint file: round trip, atomic format, and every way it can be bad (never an exception)."""

from __future__ import annotations

import json

from driver.plugin.state.checkpoint import STATE_COMPLETED, Checkpoint, ClaimRecord, DeviceRecord, MigRecord


def sample() -> dict:
    dev = DeviceRecord(
        ["r"],
        "node-a",
        "gpu-0-mig-1g10gb-6",
        None,
        ["k8s.gpu.carve.dev/claim=u1-gpu-0-mig-1g10gb-6"],
        "mig",
        "GPU-0",
        MigRecord("GPU-0", "1g.10gb", 6, 3, "MIG-x"),
    )
    return {"u1": ClaimRecord("u1", "ns", "c", STATE_COMPLETED, [dev])}


def test_round_trip(tmp_path):
    cp = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    cp.save(sample())
    loaded = cp.load()
    assert loaded.status == "ok" and loaded.claims == sample()
    assert (tmp_path / "checkpoint.json").stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".*.tmp"))


def test_missing_is_empty(tmp_path):
    assert Checkpoint(tmp_path / "checkpoint.json", "b").load().status == "missing"


def test_tampered_data_fails_the_checksum_and_is_moved_aside(tmp_path):
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path, "boot-1")
    cp.save(sample())
    doc = json.loads(path.read_text())
    doc["data"]["claims"]["u1"]["state"] = "PrepareStarted"
    path.write_text(json.dumps(doc))
    loaded = cp.load()
    assert loaded.status == "corrupt" and "checksum" in loaded.detail
    assert loaded.moved_to and loaded.moved_to.exists() and not path.exists()


def test_truncated_file_and_unknown_version_are_corrupt(tmp_path):
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path, "b")
    path.write_text('{"version": 1, "checks')
    assert cp.load().status == "corrupt"
    cp.save(sample())
    doc = json.loads(path.read_text())
    doc["version"] = 99
    path.write_text(json.dumps(doc))
    loaded = cp.load()
    assert loaded.status == "corrupt" and "version" in loaded.detail


def test_other_boot_is_reported_with_its_claims(tmp_path):
    Checkpoint(tmp_path / "checkpoint.json", "boot-1").save(sample())
    loaded = Checkpoint(tmp_path / "checkpoint.json", "boot-2").load()
    assert loaded.status == "rebooted" and set(loaded.claims) == {"u1"}


def test_reload_if_changed_sees_only_other_writers_and_never_moves_a_bad_file(tmp_path):
    mine = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    other = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    mine.save({})
    assert mine.reload_if_changed() is None  # our own write
    other.save(sample())
    reloaded = mine.reload_if_changed()
    assert reloaded.status == "ok" and reloaded.claims == sample()
    assert mine.reload_if_changed() is None
    (tmp_path / "checkpoint.json").write_text("{not json")
    assert mine.reload_if_changed().status == "corrupt"
    assert (tmp_path / "checkpoint.json").read_text() == "{not json"  # left for the next start to handle


def test_version_1_is_read_without_pods_and_written_back_as_version_2(tmp_path):
    # a checkpoint of the plugin before claims recorded their pods (version 1: no "pods" per claim)
    from driver.plugin.state.checkpoint import _checksum

    path = tmp_path / "checkpoint.json"
    claims = {"u1": {"namespace": "ns", "name": "c", "state": STATE_COMPLETED, "devices": []}}
    data = {"bootID": "b", "claims": claims}
    path.write_text(json.dumps({"version": 1, "checksum": _checksum(data), "data": data}))
    cp = Checkpoint(path, "b")
    loaded = cp.load()
    assert loaded.status == "ok" and loaded.claims["u1"].pods == []
    loaded.claims["u1"].pods = ["00000001-0000-4000-8000-000000000001"]
    cp.save(loaded.claims)
    doc = json.loads(path.read_text())
    assert doc["version"] == 2 and doc["data"]["claims"]["u1"]["pods"] == loaded.claims["u1"].pods
    assert cp.load().claims == loaded.claims
