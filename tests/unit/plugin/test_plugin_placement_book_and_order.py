"""--placement's inputs and output at their edges: a slice already in the wanted order is published as it
is, and the slices after it are still ordered; the memory a restarted plugin counts for a claim it was not
told of comes from the claim's limits file, summed per GPU, and a claim with no limits file (a whole GPU, a
MIG device) or only admin-access devices counts no memory (by shares only), without failing the order."""

from __future__ import annotations

from driver import names
from driver.devices import Settings
from driver.devices.catalog import fake_gpu
from driver.devices.slices import build_slices
from driver.limits.env import ClaimLimits, DeviceLimit
from driver.limits.limitsfile import write_limits
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.placement import Load, MemoryBook, gpu_loads, order_devices
from driver.plugin.state.checkpoint import ClaimRecord, DeviceRecord

GIB = 1 << 30


def _soft_slices():
    gpus = [fake_gpu("A100-80GB", i, "node-a") for i in range(4)]
    built = build_slices("node-a", gpus, {i: names.STRATEGY_SOFT for i in range(4)}, Settings(), "1.36")
    soft = [
        d
        for s in built
        for d in s["spec"].get("devices") or []
        if d["name"] in {f"gpu-{i}" for i in range(4)}
    ]
    base = built[0]
    make = lambda name, devs: {**base, "metadata": {"name": name}, "spec": {**base["spec"], "devices": devs}}  # noqa: E731
    return make("a", soft[:2]), make("b", soft[2:]), {g.name: g.uuid for g in gpus}


def test_a_slice_already_in_order_is_kept_as_it_is_and_the_next_one_still_ordered():
    first, second, uuid = _soft_slices()
    loads = {uuid["gpu-0"]: Load(4 * GIB, 1), uuid["gpu-3"]: Load(8 * GIB, 1)}
    out = order_devices([first, second], loads, "binpack")
    assert out[0] is first  # gpu-0 is the more loaded of its slice already: nothing rewritten
    assert [d["name"] for d in out[1]["spec"]["devices"]] == ["gpu-3", "gpu-2"]
    assert [d["name"] for d in second["spec"]["devices"]] == ["gpu-2", "gpu-3"]  # input unchanged


def _record(uid: str, *devices: DeviceRecord) -> ClaimRecord:
    return ClaimRecord(uid, "ns", uid, "PrepareCompleted", list(devices))


def _dev(gpu: str, admin: bool = False, device_type: str = "vgpu") -> DeviceRecord:
    return DeviceRecord(["r"], "node-a", "d", "s", [], type=device_type, gpu_uuid=gpu, admin=admin)


def test_a_restarted_plugin_counts_a_claims_memory_from_its_limits_file_per_gpu(tmp_path):
    files = ClaimFiles(tmp_path / "two")
    files.limits.parent.mkdir(parents=True)
    devices = (DeviceLimit(5 * GIB, 0, "U1"), DeviceLimit(2 * GIB, 0, "U1"), DeviceLimit(3 * GIB, 0, "U2"))
    write_limits(files.limits, ClaimLimits(devices, "/r"))
    book = MemoryBook(tmp_path)
    two = _record("two", _dev("U1"), _dev("U1"), _dev("U2"))
    assert book.memory([two]) == {"two": {"U1": 7 * GIB, "U2": 3 * GIB}}


def test_claims_without_a_limits_file_or_with_only_admin_devices_count_no_memory(tmp_path):
    admin_files = ClaimFiles(tmp_path / "admin")
    admin_files.limits.parent.mkdir(parents=True)
    # even a limits file beside an admin-only claim is not read: admin access holds no quota
    write_limits(admin_files.limits, ClaimLimits((DeviceLimit(9 * GIB, 0, "U1"),), "/r"))
    records = [
        _record("whole", _dev("U1", device_type="gpu")),  # no limits file
        _record("admin", _dev("U1", admin=True)),
        _record("none", _dev("")),  # a device with no GPU named
    ]
    book = MemoryBook(tmp_path)
    memory = book.memory(records)
    assert memory == {"whole": {}, "admin": {}, "none": {}}
    assert gpu_loads(records, memory) == {"U1": Load(0, 1)}  # the whole GPU counts as a share
    # the answers are kept: a limits file written later is not read for a claim already counted
    whole = ClaimFiles(tmp_path / "whole")
    whole.limits.parent.mkdir(parents=True)
    write_limits(whole.limits, ClaimLimits((DeviceLimit(GIB, 0, "U1"),), "/r"))
    assert book.memory(records)["whole"] == {}


def test_a_claim_remembered_at_prepare_is_not_read_from_disk_and_is_forgotten_when_gone(tmp_path):
    book = MemoryBook(tmp_path)
    book.remember(
        "c", ClaimLimits((DeviceLimit(GIB, 0, "U0"), DeviceLimit(GIB, 0, "U0"), DeviceLimit(4, 0, "")), "/r")
    )
    rec = _record("c", _dev("U0"))
    assert book.memory([rec]) == {"c": {"U0": 2 * GIB}}  # a device without a GPU uuid is left out
    assert book.memory([]) == {}
    assert book.memory([rec]) == {"c": {}}  # forgotten: read again, and no limits file is there
