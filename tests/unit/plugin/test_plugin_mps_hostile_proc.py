"""Property test (hypothesis): the plugin's MPS daemon bookkeeping reads /proc/<pid>/stat, whose command
name a tenant's process picks (prctl PR_SET_NAME: spaces, parentheses, digits, any byte but NUL), and must
still find field 22 (the start time that, with the pid, names the daemon for good: driver/plugin/mps).
Budget: CARVE_HYPOTHESIS_EXAMPLES (default 120)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from driver.plugin.mps.daemon import start_time

EXAMPLES = int(os.environ.get("CARVE_HYPOTHESIS_EXAMPLES", "120"))
COMM = st.binary(max_size=64).filter(lambda b: b"\0" not in b) | st.sampled_from(
    [b") S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 666", b"a) (b", b"))))", b"\n\n", b" " * 15]
)


def stat_line(pid: int, comm: bytes, started: int) -> bytes:
    # fields 3..21 then 22 (starttime) then the rest, as proc(5) lists them
    fields = (
        [b"S", b"1", b"1", b"1", b"0", b"-1", b"4194560"] + [b"0"] * 12 + [str(started).encode(), b"1", b"2"]
    )
    return str(pid).encode() + b" (" + comm + b") " + b" ".join(fields) + b"\n"


@settings(max_examples=EXAMPLES, deadline=None)
@given(comm=COMM, started=st.integers(0, 2**63 - 1), pid=st.integers(1, 2**22))
def test_a_command_name_cannot_shift_the_start_time(comm, started, pid):
    with tempfile.TemporaryDirectory() as d:
        proc = Path(d)
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_bytes(stat_line(pid, comm, started))
        assert start_time(pid, proc) == started


@settings(max_examples=EXAMPLES, deadline=None)
@given(raw=st.binary(max_size=8192))
def test_any_stat_file_gives_a_number_or_none(raw):
    with tempfile.TemporaryDirectory() as d:
        proc = Path(d)
        (proc / "7").mkdir()
        (proc / "7" / "stat").write_bytes(raw)
        got = start_time(7, proc)
        assert got is None or isinstance(got, int)
    # a pid with no stat file (gone) is None, not an error
    assert start_time(7, Path(d)) is None
