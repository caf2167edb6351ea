"""read_soname on a library of the classic two-segment layout (driver/plugin/container/libfiles.py): older
linkers, and every linker with a large max-page-size (x86_64's 2 MiB before binutils 2.31, 64 KiB on other
architectures), put the data segment at another distance from its file offset than the text segment. The
string table's file offset must come from the segment that holds it, not from a later segment that starts
past it, or a driver library of such a layout gets a wrong (or no) SONAME link."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

from driver.plugin.container.libfiles import read_soname

_PT_LOAD = 1


def _loads(lib: Path) -> list[tuple[int, int]]:
    """(virtual address, file offset) of each PT_LOAD of a 64-bit little-endian ELF file."""
    data = lib.read_bytes()
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    out = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr = struct.unpack_from("<IIQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            out.append((p_vaddr, p_offset))
    return out


def test_the_soname_is_read_through_the_segment_holding_the_string_table(tmp_path: Path) -> None:
    source = tmp_path / "seg.c"
    source.write_text("int counter = 1;\nint get(void) { return counter; }\n")  # a data segment too
    lib = tmp_path / "libseg.so.580.95.05"
    flags = ["-Wl,-soname,libseg.so.1", "-Wl,-z,noseparate-code", "-Wl,-z,max-page-size=0x10000"]
    cmd = ["cc", "-shared", "-nostdlib", "-fPIC", "-o", str(lib), *flags, str(source)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    loads = _loads(lib)
    # the layout this test is about: the text segment at its file offset, the data segment elsewhere
    assert len(loads) == 2, loads
    assert loads[0][0] - loads[0][1] != loads[1][0] - loads[1][1], loads
    assert read_soname(lib) == "libseg.so.1"
