"""Property test (hypothesis): a hostile or corrupt checkpoint never takes the plugin down, and its replay
(recovery at plugin start, running as root) touches nothing outside the plugin's and the CDI directories.

Two kinds of input: a real checkpoint and log (written by Checkpoint.save) with bytes flipped, cut, or
inserted; and documents with a valid checksum (so they pass the integrity gate and reach the decoder)
whose fields are hostile: path-like claim UIDs ("../../x", "/abs", ".."), wrong types, huge or negative
sequence numbers, deep nesting. Budget: CARVE_HYPOTHESIS_EXAMPLES examples per test (default 120).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.driverroot import LAYOUTS, build_driver_root, hook_dir

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.container.edits import HostLayout
from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    STATE_STARTED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
    _checksum,
    _log_record,
)
from driver.plugin.state.recovery import recover

EXAMPLES = int(os.environ.get("CARVE_HYPOTHESIS_EXAMPLES", "120"))
BUDGET = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HOSTILE_UIDS = ["../../victim", "/tmp/abs", "..", ".", "a/b", "", "x\x00y", "ok-" + "a" * 300, "claim-1"]


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    base = tmp_path_factory.mktemp("layout")
    limiter = hook_dir(base / "lib")
    (limiter / names.LIMITER_LIBRARY).touch()
    driver = build_driver_root(base / "root", LAYOUTS["rhel"], base / "stubs")
    return HostLayout.scan(driver, hook_dir=limiter), limiter


def node(layout, top: Path) -> tuple[Preparer, Path]:
    """A preparer whose plugin and CDI directories are under top/node; top/victim is what must survive."""
    host, limiter = layout
    victim = top / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    catalog = {"gpu-0": NodeDevice("gpu-0", names.TYPE_VGPU, "GPU-0", 0, {"memory": 80 << 30, "cores": 100})}
    plugin = top / "node" / "plugin"
    preparer = Preparer(
        PreparerSettings("node-a", plugin, top / "node" / "cdi", limiter),
        LocalCluster(),
        host,
        None,
        lambda: catalog,
        Checkpoint(plugin / "checkpoint.json", "boot"),
    )
    return preparer, victim


def everything(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*") if not str(p.relative_to(top)).startswith("node")}


def replay(layout, snapshot: bytes | None, log: bytes | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        top = Path(d)
        preparer, victim = node(layout, top)
        plugin = Path(preparer.settings.plugin_dir)
        plugin.mkdir(parents=True)
        (plugin / "claims").mkdir()
        if snapshot is not None:
            (plugin / "checkpoint.json").write_bytes(snapshot)
        if log is not None:
            (plugin / "checkpoint.log").write_bytes(log)
        before = everything(top)
        status = recover(preparer)  # never raises
        assert status in ("ok", "missing", "corrupt", "rebooted")
        assert everything(top) == before, "recovery changed files outside the plugin's directories"
        assert (victim / "keep").read_text() == "mine"
        # What recovery left is readable, and every claim in it has a plain-name uid
        again = Checkpoint(plugin / "checkpoint.json", "boot").load()
        assert again.status in ("ok", "missing"), again.detail
        for uid in again.claims:
            assert uid and "/" not in uid and uid not in (".", "..") and "\x00" not in uid


def valid_files() -> tuple[bytes, bytes]:
    with tempfile.TemporaryDirectory() as d:
        cp = Checkpoint(Path(d) / "checkpoint.json", "boot")
        dev = DeviceRecord(
            ["r"], "node-a", "gpu-0", None, ["gpu.carve.dev/claim=x"], type="vgpu", gpu_uuid="GPU-0"
        )
        claims = {
            "u1": ClaimRecord("u1", "ns", "a", STATE_COMPLETED, [dev]),
            "u2": ClaimRecord("u2", "ns", "b", STATE_STARTED, [dev]),
        }
        cp.save(claims)
        claims["u3"] = ClaimRecord("u3", "ns", "c", STATE_STARTED, [])
        cp.save(claims, ["u3"])
        del claims["u1"]
        cp.save(claims, ["u1"])
        return (Path(d) / "checkpoint.json").read_bytes(), (Path(d) / "checkpoint.log").read_bytes()


SNAPSHOT, LOG = valid_files()


@st.composite
def mutated(draw, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        pos = draw(st.integers(0, max(0, len(out) - 1)))
        if op == "flip" and out:
            out[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del out[pos : pos + draw(st.integers(1, 64))]
        elif op == "insert":
            out[pos:pos] = draw(st.sampled_from([b"\x00", b"{", b"]", b'"', b"\n", b"9" * 40, b'"..":']))
        else:
            del out[pos:]
    return bytes(out)


@BUDGET
@given(snap=st.one_of(st.none(), mutated(SNAPSHOT)), log=st.one_of(st.none(), mutated(LOG)))
def test_a_corrupted_checkpoint_is_moved_aside_or_read_never_raises(layout, snap, log):
    replay(layout, snap, log)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


@st.composite
def hostile_claim(draw) -> dict:
    device = {
        "request_names": draw(st.one_of(st.just(["r"]), JSON)),
        "pool": draw(st.one_of(st.just("node-a"), JSON)),
        "device": draw(st.one_of(st.just("gpu-0"), st.sampled_from(HOSTILE_UIDS), JSON)),
        "share_id": draw(st.one_of(st.none(), st.sampled_from(HOSTILE_UIDS))),
        "cdi_ids": draw(st.one_of(st.just(["gpu.carve.dev/claim=x"]), JSON)),
        "mig": draw(st.one_of(st.none(), JSON)),
    }
    return {
        "namespace": draw(st.one_of(st.just("ns"), JSON)),
        "name": draw(st.one_of(st.just("n"), JSON)),
        "state": draw(st.sampled_from([STATE_STARTED, STATE_COMPLETED, "Other"])),
        "devices": draw(st.one_of(st.just([device]), JSON)),
        "pods": draw(st.one_of(st.just([]), JSON)),
    }


@BUDGET
@given(
    claims=st.dictionaries(st.sampled_from(HOSTILE_UIDS) | st.text(max_size=10), hostile_claim(), max_size=3),
    seq=st.one_of(st.integers(-5, 5), st.integers(2**62, 2**70), st.text(max_size=3)),
    records=st.lists(
        st.tuples(
            st.integers(-3, 9),
            st.sampled_from(["put", "del"]),
            st.sampled_from(HOSTILE_UIDS),
            hostile_claim(),
        ),
        max_size=3,
    ),
)
def test_a_checksummed_hostile_checkpoint_replays_inside_the_plugin_dirs(layout, claims, seq, records):
    data = {"bootID": "boot", "seq": seq, "claims": claims}
    snapshot = json.dumps({"version": 2, "checksum": _checksum(data), "data": data}).encode()
    log = b"".join(_log_record(s, op, uid, claim if op == "put" else None) for s, op, uid, claim in records)
    replay(layout, snapshot, log)
