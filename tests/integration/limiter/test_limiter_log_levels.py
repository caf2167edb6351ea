"""The limiter's log lines name their level (`carve-limiter[<pid>] <level>: ...`), so that an operator
reading a pod's stderr, or a log filter, can tell a refusal from a debug trace (a survivor of generated
mutants in native/src/config.c: the level's name taken from the wrong bits)."""

from __future__ import annotations

import re

MIB = 1 << 20


def test_each_line_carries_its_own_level_name(claim):
    c = claim().create(memory=64 * MIB)
    out = c.run("alloc", str(1 * MIB), CARVE_LOG="debug")
    assert out.stdout.strip() == "0", out.stderr
    # binding the device to the claim is a debug trace
    assert re.search(r"^carve-limiter\[\d+\] debug: device 0 \(", out.stderr, re.M), out.stderr
    assert not re.search(r"^carve-limiter\[\d+\] (error|warn): device 0 \(", out.stderr, re.M), out.stderr
    broken = claim("broken").create(memory=64 * MIB)
    broken.region.unlink()
    broken.region.write_bytes(b"x" * 4096)
    out = broken.run("alloc", str(1 * MIB), CARVE_LOG="debug")
    assert re.search(r"^carve-limiter\[\d+\] error: region .*", out.stderr, re.M), out.stderr
