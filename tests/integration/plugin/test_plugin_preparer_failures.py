"""The Preparer in process, with MIG emulated by a dict: a failure fails only its claim. What the claim
had made is rolled back (MIG instance, region, spec), the error names the claim and the cause in one line
(an unexpected exception is an internal error for that claim, its traceback in the log), the other claims of
the call are prepared, and the kubelet's retry succeeds once the cause is gone."""

from __future__ import annotations

import pytest
from support.preparer_world import MIXED, DictMig, preparer_world, put

from driver.plugin.state.recovery import recover


@pytest.fixture
def world(tmp_path, stub_cache):
    return preparer_world(tmp_path, stub_cache)


def test_failure_rolls_back_only_that_claim(world, tmp_path):
    cluster, _, make = world
    broken = DictMig(fail=True)
    p = make(mig_ops=broken)
    recover(p)
    good = put(cluster, "good", MIXED[1:])
    bad = put(cluster, "bad", MIXED)
    out = p.prepare([good, bad])
    assert out[good.uid].error == ""
    assert "gpu-0-mig-1g10gb-6" in out[bad.uid].error and "INSUFFICIENT_RESOURCES" in out[bad.uid].error
    assert set(p.state) == {good.uid}
    assert not (tmp_path / "plugin" / "claims" / bad.uid).exists()
    assert p.specs.claim_uids() == {good.uid}


def test_a_missing_device_node_fails_only_the_claims_that_need_it(world, tmp_path):
    cluster, _, make = world
    p = make()
    recover(p)
    (tmp_path / "root/dev/nvidia1").unlink()  # gpu-1's node gone; gpu-0 (the MIG parent) still there
    soft = put(cluster, "soft", MIXED[1:])
    whole_mig = put(cluster, "mig", MIXED[:1])
    out = p.prepare([soft, whole_mig])
    missing = f"device node /dev/nvidia1 does not exist in {tmp_path}/root/dev"
    assert out[soft.uid].error == f"claim ns/soft ({soft.uid}): {missing}"
    assert out[whole_mig.uid].error == ""
    assert set(p.state) == {whole_mig.uid} and p.specs.claim_uids() == {whole_mig.uid}
    assert not (tmp_path / "plugin" / "claims" / soft.uid).exists()  # its region was rolled back
    (tmp_path / "root/dev/nvidia1").touch()  # the node is back: the kubelet's retry succeeds
    assert p.prepare([soft])[soft.uid].error == ""


def test_an_unreadable_mig_capability_file_fails_the_claim_and_frees_the_instance(world, tmp_path):
    cluster, mig, make = world
    p = make()
    recover(p)
    for access in (tmp_path / "proc").rglob("gi1/ci0/access"):
        access.unlink()
    ref = put(cluster, "mig", MIXED[:1])
    error = p.prepare([ref])[ref.uid].error
    assert "MIG capability nodes of gpu0/gi1/ci0" in error and "gi1/ci0/access" in error
    assert mig.live == {} and p.state == {}


def test_unexpected_exception_is_an_internal_error_for_that_claim(world, caplog):
    cluster, _, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[1:])
    original = cluster.get_resource_claim
    cluster.get_resource_claim = lambda ns, n: (_ for _ in ()).throw(ZeroDivisionError("boom"))
    assert p.prepare([ref])[ref.uid].error == "internal error: ZeroDivisionError: boom"
    (logged,) = [r for r in caplog.records if "internal.error" in r.getMessage()]
    assert logged.exc_info and logged.exc_info[0] is ZeroDivisionError  # the traceback is in the log
    cluster.get_resource_claim = original
    assert p.prepare([ref])[ref.uid].error == ""


def test_a_full_state_disk_fails_the_claim_in_one_line_and_the_retry_succeeds(world, tmp_path, caplog):
    import errno
    import os

    cluster, _, make = world
    p = make()
    recover(p)
    done = put(cluster, "done", MIXED[1:])
    assert p.prepare([done])[done.uid].error == ""
    ref = put(cluster, "a", MIXED[1:])
    real_write = os.write

    def full(fd: int, data) -> int:  # the first bytes fit, then the filesystem is full
        if len(data) > 16:
            real_write(fd, bytes(data[:16]))
            return 16
        raise OSError(errno.ENOSPC, "No space left on device")

    os.write = full
    try:
        error = p.prepare([ref])[ref.uid].error
    finally:
        os.write = real_write
    assert error.startswith(f"claim ns/a ({ref.uid}): prepare: no space left on the plugin's state")
    assert not [r for r in caplog.records if "internal.error" in r.getMessage()]  # no traceback
    assert set(p.state) == {done.uid} and not (tmp_path / "plugin" / "claims" / ref.uid).exists()
    assert p.prepare([ref])[ref.uid].error == ""  # space again: the kubelet's retry
    fresh = make()
    recover(fresh)
    assert set(fresh.state) == {done.uid, ref.uid}  # the checkpoint reads whole after the torn writes
