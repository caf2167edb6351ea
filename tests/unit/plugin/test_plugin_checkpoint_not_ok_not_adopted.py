"""A checkpoint another writer left unreadable, or one of another boot, is not adopted
(driver/plugin/claims/preparer.py, `sync`): the plugin keeps the claims it holds in memory, so a claim
prepared before still unprepares (its CDI spec goes), instead of the plugin taking the file's claims (none
here) for the node's and forgetting every claim it prepared. The files are judged as a whole load judges
them (status `corrupt`, `rebooted`); only an `ok` one replaces the state."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from support.preparer_world import preparer_world, put, share

from driver.plugin.state.checkpoint import Checkpoint
from driver.plugin.state.recovery import recover


@pytest.mark.parametrize(
    ("damage", "status"),
    [
        (b"not json\n", "corrupt"),  # garbage where the snapshot was
        (json.dumps({"version": 1, "claims": {}, "checksum": "0"}).encode(), "corrupt"),  # a bad checksum
        (Checkpoint(Path("unused"), "b0").encode({}), "rebooted"),  # a good snapshot of an earlier boot
    ],
)
def test_a_checkpoint_not_ok_leaves_the_claims_in_memory(
    tmp_path, stub_cache, caplog, damage: bytes, status: str
) -> None:
    cluster, _, make = preparer_world(tmp_path, stub_cache)
    p = make()
    recover(p)
    ref = put(cluster, "c", [share("s", "gpu-1", "0b0e0a0d-1111-4222-8333-444455556666")])
    assert p.prepare([ref])[ref.uid].error == ""
    spec = p.specs.path(ref.uid)
    assert spec.exists()
    (tmp_path / "checkpoint.json").write_bytes(damage)  # written by someone else: a change since our save
    with caplog.at_level(logging.WARNING):
        assert p.unprepare([ref])[ref.uid] == ""
    assert not spec.exists(), "the claim was forgotten: its CDI spec stays"
    skipped = [r for r in caplog.records if r.getMessage() == "checkpoint.reload-skipped"]
    assert [r.fields["status"] for r in skipped] == [status]
