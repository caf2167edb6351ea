"""A region the limiter refuses (its size right, its header not carve's) fails closed and is not left mapped
writable in the process (a survivor of generated mutants in native/src/region.c: the unmap on the refusal
path). Each header field out of its range is refused with its own reason; its edges in range are not."""

from __future__ import annotations

from pathlib import Path

import pytest

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


# (header field, value, the limiter's problem with it; None: a valid edge the limiter accepts)
HEADERS = [
    ("magic", 0x4745524556524144, "bad magic (not a carve region)"),
    ("version", 3, "foreign layout version"),
    ("size", 1, "size field does not match this layout"),
    ("device_count", 0, "device or process count out of range"),
    ("device_count", 17, "device or process count out of range"),
    ("device_count", 16, None),
    ("max_procs", 0, "device or process count out of range"),
    ("max_procs", 1025, "device or process count out of range"),
    ("max_procs", 1024, None),
    ("core_policy", 3, "policy out of range"),
    ("core_policy", 2, None),
    ("priority", 2, "policy out of range"),
    ("priority", 1, None),
    ("oom_policy", 2, "policy out of range"),
    ("oom_policy", 1, None),
]


@pytest.mark.parametrize(("field", "value", "problem"), HEADERS, ids=[f"{f}={v}" for f, v, _ in HEADERS])
def test_each_header_field_out_of_its_range_makes_the_region_refused(claim, field, value, problem):
    c = claim().create(memory=64 * MIB)
    data = bytearray(c.region.read_bytes())
    s = RegionStruct.from_buffer(data)
    setattr(s, field, value)
    del s
    c.region.unlink()
    c.region.write_bytes(bytes(data))
    out = c.run("alloc", str(1 * MIB))
    if problem is None:  # in range: the region is used, and only the limits file's quota applies
        assert out.stdout.strip() == "0" and f"region {c.region}" not in out.stderr, out.stderr
    else:  # refused, named, and the claim fails closed
        assert out.stdout.strip() == "2", out.stderr
        assert f"region {c.region}: {problem}; skipped" in out.stderr, out.stderr


@pytest.mark.parametrize("delta", [4096, -8], ids=["a-page-longer", "shorter"])
def test_a_region_file_of_another_length_is_refused(claim, delta):
    # the layout's length exactly: a longer file (a newer layout, bytes appended) is refused, as a shorter is
    c = claim().create(memory=64 * MIB)
    data = c.region.read_bytes()
    c.region.unlink()
    c.region.write_bytes(data + bytes(delta) if delta > 0 else data[:delta])
    out = c.run("alloc", str(1 * MIB))
    assert out.stdout.strip() == "2", out.stderr  # refused, and the claim fails closed
    assert f"region {c.region}: file size does not match this layout" in out.stderr, out.stderr
