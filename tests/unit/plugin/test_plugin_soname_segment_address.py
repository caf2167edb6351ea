"""read_soname on a library linked at a non-zero base address (driver/plugin/container/libfiles.py): the
string table's place in the file is its virtual address less its segment's, plus the segment's offset, as
the ELF specification maps them; a library of a driver installer linked at another base (prelinked, or a
linker script's -Ttext-segment) gets its SONAME link like any other."""

from __future__ import annotations

import subprocess

from driver.plugin.container.libfiles import read_soname


def test_the_soname_of_a_library_linked_at_a_non_zero_base_is_read(tmp_path):
    lib = tmp_path / "libseg.so.580.95.05"
    flags = ["-Wl,-soname,libseg.so.1", "-Wl,-Ttext-segment=0x200000"]
    cmd = ["cc", "-shared", "-nostdlib", "-o", str(lib), *flags, "-x", "c", "/dev/null"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    assert read_soname(lib) == "libseg.so.1"
