"""A new claim's compute share at prepare (driver/plugin/enforcement/regions.py, claim_runtime), next to the
claims already on its GPU: a neighbour still being prepared counts only once its own prepare has computed
its region (prepares overlap), a completed neighbour whose limits file cannot be read is left out (the region
watcher reports it and corrects the share at its next pass), and admin-access devices and other GPUs'
claims never count."""

from __future__ import annotations

from driver import names
from driver.limits.env import ClaimLimits, DeviceLimit
from driver.limits.limitsfile import write_limits
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.enforcement.regions import ClaimRegion, claim_runtime
from driver.plugin.state.checkpoint import STATE_COMPLETED, STATE_STARTED, ClaimRecord, DeviceRecord

NEW = ClaimLimits((DeviceLimit(1 << 30, 0, "GPU-A"),), "/r")  # best effort on GPU-A


def _record(uid, gpu="GPU-A", state=STATE_COMPLETED, admin=False, device_type=names.TYPE_VGPU):
    device = DeviceRecord(["r"], "p", "d", "s", [], device_type, gpu, admin=admin)
    return ClaimRecord(uid, "ns", uid, state, [device])


def _write(claims_dir, uid, cores, gpu="GPU-A", priority="high"):
    files = ClaimFiles(claims_dir / uid)
    files.root.mkdir(parents=True)
    write_limits(files.limits, ClaimLimits((DeviceLimit(1 << 30, cores, gpu),), "/r", priority=priority))


def test_a_neighbour_mid_prepare_counts_only_once_its_region_is_known(tmp_path):
    _write(tmp_path, "starting", 30)  # its limits file is there, its prepare not finished
    state = {"starting": _record("starting", state=STATE_STARTED)}
    assert claim_runtime("new", NEW, state, tmp_path, {}).shares == (0,)  # alone: no limit
    known = {"starting": ClaimRegion("starting", "high", ("GPU-A",), (30,))}
    assert claim_runtime("new", NEW, state, tmp_path, known).shares == (70,)


def test_a_neighbour_whose_limits_file_cannot_be_read_is_left_out(tmp_path):
    _write(tmp_path, "good", 20)
    ClaimFiles(tmp_path / "broken").limits.parent.mkdir(parents=True)
    ClaimFiles(tmp_path / "broken").limits.write_bytes(b"garbage")
    state = {"broken": _record("broken"), "good": _record("good"), "gone": _record("gone")}
    known: dict[str, ClaimRegion] = {}
    assert claim_runtime("new", NEW, state, tmp_path, known).shares == (80,)
    assert set(known) == {"good", "new"}  # nothing cached for the unreadable ones: read again next time


def test_admin_devices_and_other_gpus_do_not_count_and_a_low_claim_sees_its_high_neighbours(tmp_path):
    _write(tmp_path, "admin", 50)
    _write(tmp_path, "elsewhere", 50, gpu="GPU-B")
    _write(tmp_path, "whole", 50)
    _write(tmp_path, "high", 10)
    state = {
        "admin": _record("admin", admin=True),
        "elsewhere": _record("elsewhere", gpu="GPU-B"),
        "whole": _record("whole", device_type=names.TYPE_GPU),
        "high": _record("high"),
    }
    low = ClaimLimits((DeviceLimit(1 << 30, 25, "GPU-A"),), "/r", priority="low")
    got = claim_runtime("new", low, state, tmp_path, {})
    assert (got.shares, got.high_neighbours) == ((25,), (1,))
