"""A checkpoint whose checksum holds but whose claim record is not one a save could write (an older or
foreign writer, a hand edit with the checksum redone): the plugin's load reports it corrupt with the field
named in the detail (what `carve` logs and an admin reads), moves the files aside, and never raises.
Recovery then rebuilds from the claims directory; a record taken half-read would make it remove or keep the
wrong files as root."""

from __future__ import annotations

import copy
import json

import pytest

from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
    MigRecord,
    _checksum,
    _log_record,
    claim_to_json,
)


def _claim() -> ClaimRecord:
    devices = [
        DeviceRecord(["r"], "node-a", "gpu-0", "s-1", ["k8s.gpu.carve.dev/claim=u1-gpu-0"], "vgpu", "GPU-0"),
        DeviceRecord(
            ["r"],
            "node-a",
            "gpu-1-mig",
            None,
            [],
            "mig",
            "GPU-1",
            MigRecord("GPU-1", "1g.10gb", 6, 3, "MIG-x"),
        ),
    ]
    return ClaimRecord("u1", "ns", "c", STATE_COMPLETED, devices, pods=["pod-1"])


def _set(path: tuple, value):
    def change(raw: dict) -> None:
        where = raw
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value

    return change


CASES = [
    (("devices",), {}, "claims.u1.devices: dict where list belongs"),
    (("devices", 0), ["x"], "claims.u1.devices[0]: list where dict belongs"),
    (("devices", 1, "request_names"), "r", "claims.u1.devices[1].request_names: str where list belongs"),
    (("devices", 0, "request_names"), ["r", 1], "claims.u1.devices[0].request_names: not a list of strings"),
    (("devices", 1, "cdi_ids"), [None], "claims.u1.devices[1].cdi_ids: not a list of strings"),
    (("devices", 0, "cdi_ids"), None, "claims.u1.devices[0].cdi_ids: NoneType where list belongs"),
    (("devices", 1, "pool"), 5, "claims.u1.devices[1].pool: int where str belongs"),
    (("devices", 0, "device"), True, "claims.u1.devices[0].device: bool where str belongs"),
    (("devices", 0, "share_id"), 7, "claims.u1.devices[0].share_id: int where str belongs"),
    (("devices", 1, "mig"), "1g.10gb", "claims.u1.devices[1].mig: str where dict belongs"),
    (("namespace",), None, "claims.u1.namespace: NoneType where str belongs"),
    (("name",), 3, "claims.u1.name: int where str belongs"),
    (("state",), "Half", "claims.u1.state: unknown state 'Half'"),
    (("pods",), "pod-1", "claims.u1.pods: not a list of pod UIDs"),
    (("pods",), ["pod-1", 2], "claims.u1.pods: not a list of pod UIDs"),
]


def _write_snapshot(path, claims: dict, boot: str = "boot-1") -> None:
    data = {"bootID": boot, "claims": claims, "seq": 0}
    path.write_text(json.dumps({"version": 2, "checksum": _checksum(data), "data": data}))


def test_a_claim_a_save_writes_reads_back_whole(tmp_path):
    path = tmp_path / "checkpoint.json"
    _write_snapshot(path, {"u1": claim_to_json(_claim())})
    loaded = Checkpoint(path, "boot-1").load()
    assert (loaded.status, loaded.claims) == ("ok", {"u1": _claim()})


@pytest.mark.parametrize(("where", "value", "detail"), CASES)
def test_a_snapshot_claim_with_a_field_no_save_writes_is_corrupt_naming_the_field(
    tmp_path, where, value, detail
):
    path = tmp_path / "checkpoint.json"
    raw = claim_to_json(_claim())
    _set(where, value)(raw)
    _write_snapshot(path, {"u1": raw})
    loaded = Checkpoint(path, "boot-1").load()
    assert (loaded.status, loaded.claims, loaded.detail) == ("corrupt", {}, f"ValueError: {detail}")
    assert loaded.moved_to is not None and loaded.moved_to.exists() and not path.exists()


@pytest.mark.parametrize(("where", "value", "detail"), CASES[:4] + CASES[-3:])
def test_a_log_record_with_such_a_field_is_corrupt_too(tmp_path, where, value, detail):
    path = tmp_path / "checkpoint.json"
    _write_snapshot(path, {})
    raw = claim_to_json(_claim())
    _set(where, value)(raw)
    cp = Checkpoint(path, "boot-1")
    log = cp.log_path
    log.write_bytes(_log_record(1, "put", "u1", raw))
    loaded = cp.load(move_aside=False)
    assert (loaded.status, loaded.claims, loaded.detail) == ("corrupt", {}, f"ValueError: {detail}")
    assert path.exists() and log.exists()  # move_aside=False: the caller keeps its state, the files stay


def test_a_claim_record_that_is_not_an_object_is_corrupt(tmp_path):
    path = tmp_path / "checkpoint.json"
    _write_snapshot(path, {"u1": ["ns", "c"]})
    loaded = Checkpoint(path, "boot-1").load()
    assert (loaded.status, loaded.detail) == ("corrupt", "ValueError: claims.u1: list where dict belongs")


def test_an_admin_flag_is_read_only_as_json_true(tmp_path):
    path = tmp_path / "checkpoint.json"
    raw = claim_to_json(_claim())
    raw["devices"][0]["admin"] = True
    raw["devices"][1]["admin"] = "true"
    _write_snapshot(path, {"u1": copy.deepcopy(raw)})
    loaded = Checkpoint(path, "boot-1").load()
    assert [d.admin for d in loaded.claims["u1"].devices] == [True, False]


def test_a_log_with_records_but_no_snapshot_is_corrupt_naming_both_files(tmp_path):
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path, "boot-1")
    cp.log_path.write_bytes(_log_record(1, "put", "u1", claim_to_json(_claim())))
    loaded = cp.load()
    assert loaded.status == "corrupt"
    assert loaded.detail == f"CheckpointError: checkpoint.json: missing while {cp.log_path.name} has records"
    assert not cp.log_path.exists()  # moved aside, with the snapshot that was not there


def test_a_bad_last_line_is_a_write_that_never_returned_even_with_its_newline(tmp_path):
    # a crash can leave the last append's length in the file with zeros for its bytes (delayed allocation):
    # nobody was told that write happened, so it is dropped, as a line cut short is; a bad line before the
    # last is corruption
    path = tmp_path / "checkpoint.json"
    _write_snapshot(path, {})
    cp = Checkpoint(path, "boot-1")
    good = _log_record(1, "put", "u1", claim_to_json(_claim()))
    cp.log_path.write_bytes(good + b"\0" * 40 + b"\n")
    loaded = cp.load(move_aside=False)
    assert (loaded.status, loaded.claims) == ("ok", {"u1": _claim()})
    cp.log_path.write_bytes(b"\0" * 40 + b"\n" + good)
    loaded = cp.load(move_aside=False)
    assert loaded.status == "corrupt" and loaded.detail.startswith(
        f"CheckpointError: {cp.log_path.name} line 1: "
    )
