"""The plugin rewrites a running claim's limits file (a new file each time, limits.c): the limiter's feedback
thread applies it at its next tick, and a rewrite it cannot trust to be the same claim (another device count,
a file that does not validate) leaves the last good limits in force. A claim that failed closed stays closed
whatever its file says next.

No timing is asserted: the client waits until the feedback thread has counted a launch it made after the
rewrite (the limits are re-read first in each tick), then allocates.
"""

from __future__ import annotations

from pathlib import Path

from limiter_harness import Relimit

from driver.limits import ClaimLimits, DeviceLimit, Region, write_limits

MIB = 1 << 20


def limits(c, memory: int, devices: int = 1, **kw: str) -> ClaimLimits:
    return ClaimLimits(
        devices=tuple(DeviceLimit(memory, 50) for _ in range(devices)), region_path=str(c.region), **kw
    )


def test_a_rewritten_limits_file_applies_to_a_running_process_and_a_bad_one_does_not(claim):
    c = claim().create(memory=8 * MIB, cores=50)
    with Relimit(c, 12 * MIB) as client:
        assert client.first == {"rc": 2}
        # the plugin changed the quota twice before the limiter's next tick: the last file holds. (ext4 gives
        # the second file the inode number the first one freed, often the number of the file the limiter
        # applied before: it must not take the new file for the one it has)
        write_limits(c.limits, limits(c, 4 * MIB))
        write_limits(c.limits, limits(c, 16 * MIB))
        assert client.after_rewrite() == {"rc": 0, "total": 16 * MIB}
        # another device count is not a rewrite of this claim's file: ignored
        write_limits(c.limits, limits(c, 4 * MIB, devices=2))
        assert client.after_rewrite() == {"rc": 0, "total": 16 * MIB}
        # a file that does not validate never loosens or tightens anything
        c.limits.unlink()
        c.limits.write_bytes(b"\0" * 64)
        assert client.after_rewrite() == {"rc": 0, "total": 16 * MIB}
        # the policies are rewritten too: over the new quota, the process is killed
        c.limits.unlink()
        write_limits(c.limits, limits(c, 4 * MIB, oom_policy="kill"))
        client.proc.stdin.write("go\n")
        client.proc.stdin.flush()
        rc, err = client.close()
        assert rc == -9 and "CARVE_OOM_POLICY=kill" in err, err


def test_a_claim_that_failed_closed_stays_closed_when_its_limits_are_rewritten(claim):
    c = claim().create(memory=8 * MIB, cores=50)
    c.region.unlink()
    c.region.write_bytes(b"x" * 4096)  # the container broke its accounting: the claim fails closed
    with Relimit(c, 1 * MIB) as client:
        assert client.first == {"rc": 2}
        write_limits(c.limits, limits(c, 64 * MIB))
        assert client.after_rewrite() == {"rc": 2, "total": 1}
        rc, err = client.close()
        assert rc == 0, err


def test_a_process_that_closes_every_descriptor_keeps_the_ones_it_opens_after(claim):
    """The limiter keeps the limits file it applied open (so its inode number cannot be reused). A process
    that closes every descriptor past 2, as a daemon does, and opens its own files gets that number back:
    the limiter's next rewrite must not close the process's file in its place."""
    c = claim().create(memory=8 * MIB, cores=50)
    with Relimit(c, 12 * MIB) as client:
        assert client.first == {"rc": 2}
        write_limits(c.limits, limits(c, 16 * MIB))
        assert client.after_rewrite("closeall") == {"rc": 0, "total": 16 * MIB, "mine": 1}
        # and the rewrites after it still apply
        c.limits.unlink()
        write_limits(c.limits, limits(c, 4 * MIB))
        assert client.after_rewrite() == {"rc": 2, "total": 4 * MIB}
        rc, err = client.close()
        assert rc == 0, err


def test_a_rewritten_core_policy_applies_to_a_running_process(claim):
    # The region's target is what the limiter aims at, written at each tick after the limits refresh: 100
    # under the default policy with no busy neighbour, the claim's 50% once the plugin writes "force".
    c = claim().create(memory=8 * MIB, cores=50)
    with Relimit(c, 1 * MIB) as client:
        assert client.after_rewrite() == {"rc": 0, "total": 8 * MIB}  # a tick under the first limits
        with Region.open(c.region) as r:
            assert r._struct.devices[0].target == 100
        write_limits(c.limits, limits(c, 8 * MIB, core_policy="force"))
        assert client.after_rewrite() == {"rc": 0, "total": 8 * MIB}
        with Region.open(c.region) as r:
            assert r._struct.devices[0].target == 50
        rc, err = client.close()
        assert rc == 0, err


def test_a_rewritten_limits_file_that_does_not_validate_leaks_no_descriptor(claim):
    # The limiter reads a new file at each tick until one validates: each read of a bad one closes what it
    # opened, or a claim whose file stayed bad would run its processes out of descriptors, one a tick.
    c = claim().create(memory=8 * MIB, cores=50)
    with Relimit(c, 1 * MIB) as client:
        fds = Path(f"/proc/{client.proc.pid}/fd")
        c.limits.unlink()
        c.limits.write_bytes(b"\0" * 64)  # not the layout's size: refused, read again at the next tick
        assert client.after_rewrite() == {"rc": 0, "total": 8 * MIB}
        before = len(list(fds.iterdir()))
        for _ in range(5):
            assert client.after_rewrite() == {"rc": 0, "total": 8 * MIB}
        assert len(list(fds.iterdir())) == before
        rc, err = client.close()
        assert rc == 0, err


def test_a_process_keeps_one_descriptor_of_its_limits_file_the_one_applied(claim):
    # The limiter keeps the limits file it applied open (its inode number cannot be reused); a rewrite
    # applied closes the one before, so the process never holds more than one, whatever the rewrites.
    c = claim().create(memory=8 * MIB, cores=50)
    with Relimit(c, 1 * MIB) as client:
        fds = Path(f"/proc/{client.proc.pid}/fd")

        def limits_files() -> list[str]:
            return [t for t in (str(f.readlink()) for f in fds.iterdir()) if t.startswith(str(c.limits))]

        assert client.after_rewrite() == {"rc": 0, "total": 8 * MIB}
        assert limits_files() == [str(c.limits)]
        for memory in (16, 4):
            c.limits.unlink()
            write_limits(c.limits, limits(c, memory * MIB))
            assert client.after_rewrite()["total"] == memory * MIB
            assert limits_files() == [str(c.limits)]
        rc, err = client.close()
        assert rc == 0, err
