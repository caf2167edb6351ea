"""The feedback thread looks at a claim's limits file once a tick; it reads it (and checks its mount's trust,
a scan of mountinfo) only when it is another file: the plugin changes limits by replacing the file, never in
place, so the same inode is the same limits and a tick costs one stat(2) (limits.c, carve_limits_refresh).
Bytes changed in place under the same inode are not re-read; the next replacement is."""

from __future__ import annotations

from limiter_harness import Relimit, require_native

from driver.limits import ClaimLimits, DeviceLimit, write_limits

MIB = 1 << 20


def limits(c, memory: int) -> ClaimLimits:
    return ClaimLimits(devices=(DeviceLimit(memory, 50),), region_path=str(c.region))


def test_limits_changed_in_place_are_not_reread_and_a_replacement_is(claim, tmp_path):
    require_native()
    c = claim().create(memory=8 * MIB, cores=50)
    with Relimit(c, 12 * MIB) as client:
        assert client.first == {"rc": 2}
        ino = c.limits.stat().st_ino
        staged = tmp_path / "staged"
        write_limits(staged, limits(c, 16 * MIB))
        with open(c.limits, "r+b") as f:  # the same inode, other bytes
            f.write(staged.read_bytes())
        assert c.limits.stat().st_ino == ino
        assert client.after_rewrite() == {"rc": 2, "total": 8 * MIB}
        write_limits(c.limits, limits(c, 16 * MIB))  # a new file, as the plugin writes it
        assert c.limits.stat().st_ino != ino
        assert client.after_rewrite() == {"rc": 0, "total": 16 * MIB}
        rc, err = client.close()
        assert rc == 0, err
