"""A region the limiter refuses (its size right, its header not carve's) fails closed and is not left mapped
writable in the process (a survivor of generated mutants in native/src/region.c: the unmap on the refusal
path)."""

from __future__ import annotations

from pathlib import Path

from driver.limits.region import RegionStruct

MIB = 1 << 20


def test_a_refused_region_fails_closed_and_is_not_left_mapped(claim):
    c = claim().create(memory=64 * MIB)
    data = bytearray(c.region.read_bytes())
    s = RegionStruct.from_buffer(data)
    s.magic ^= 0xFFFF  # the right size, mapped, then refused by its header
    del s
    c.region.unlink()
    c.region.write_bytes(bytes(data))
    proc = c.popen("hold", str(1 * MIB))
    try:
        line = proc.stdout.readline().strip()
        assert line == "ready 2", line  # refused: fails closed
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        mapped = [m.split()[1] for m in maps.splitlines() if m.endswith(str(c.region))]
        # a read-only view may stay (the limiter reads what the claim's region says); a writable mapping of
        # a file it refused must not: nothing of the limiter may write through it
        assert not [perms for perms in mapped if "w" in perms], mapped
    finally:
        proc.kill()
        proc.wait(30)
