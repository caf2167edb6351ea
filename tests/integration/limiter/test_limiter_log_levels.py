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


def test_a_line_longer_than_the_buffer_is_cut_and_still_one_line(claim, tmp_path):
    # a region path of 1200 characters: its "cannot open or create" line is longer than the 1024-byte buffer,
    # which cuts it inside the path
    deep = tmp_path / ("d" * 240) / ("e" * 240) / ("f" * 240) / ("g" * 240) / "missing"
    c = claim()
    out = c.run("alloc", str(1 * MIB), CARVE_REGION=str(deep / "region"), CARVE_MEMORY_LIMIT=str(8 * MIB))
    assert out.stdout.strip() == "0"
    lines = out.stderr.split("\n")
    assert lines[-1] == ""  # every line ends with its newline
    cut = [line for line in lines if f"error: region {tmp_path}/ddd" in line]
    assert len(cut) == 1 and len(cut[0]) == 1022, cut  # 1024 bytes: 1022 characters, "\n" and the NUL left
    assert cut[0].startswith("carve-limiter[") and cut[0].endswith(("d", "e", "f", "g")), cut[0]
    assert all(line.startswith("carve-limiter[") for line in lines[:-1]), lines
