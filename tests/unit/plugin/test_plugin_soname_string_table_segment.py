"""read_soname maps DT_STRTAB (a virtual address) to a file offset through the one loaded segment whose
addresses hold it: from the segment's first address up to, not including, its end. A library whose segments
sit at different distances from their file offsets (the classic two-segment layout) then reads its SONAME
whichever segment holds the table, the segment that starts right where another ends included; a table at no
loaded address is an error naming the file, never bytes read from another place of it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from driver.plugin.container.libfiles import LibFileError, read_soname

PHDR = struct.Struct("<IIQQQQQQ")  # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
PT_LOAD, PT_DYNAMIC, DT_STRTAB, DT_SONAME = 1, 2, 5, 14
DYNAMIC_AT = 0x700  # the dynamic section's file offset
SIZE = 0x800


def _library(path: Path, loads: list[tuple[int, int, int]], strtab: int, strings_at: int) -> Path:
    """An ELF64 shared object with these PT_LOAD segments (vaddr, file offset, size), in ascending vaddr as
    the ELF specification orders them, DT_STRTAB at `strtab` and the string table at file offset
    `strings_at`: "\\0libright.so.1\\0", DT_SONAME 1. Every other byte past the headers is 0x41 ('A'), so a
    wrong mapping reads a string of A's, not an empty one."""
    phdrs = [PHDR.pack(PT_LOAD, 5, off, vaddr, vaddr, size, size, 0x1000) for vaddr, off, size in loads]
    phdrs.append(PHDR.pack(PT_DYNAMIC, 6, DYNAMIC_AT, 0, 0, 48, 48, 8))
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, PHDR.size, len(phdrs), 0, 0, 0)
    data = bytearray(b"A" * SIZE)
    head = header + b"".join(phdrs)
    data[: len(head)] = head
    strings = b"\0libright.so.1\0"
    data[strings_at : strings_at + len(strings)] = strings
    data[DYNAMIC_AT : DYNAMIC_AT + 48] = struct.pack("<qQqQqQ", DT_SONAME, 1, DT_STRTAB, strtab, 0, 0)
    data[SIZE - 1] = 0  # every read ends inside the file
    path.write_bytes(bytes(data))
    return path


def test_a_table_at_the_first_address_of_a_segment_that_starts_where_another_ends(tmp_path: Path) -> None:
    # The first segment ends at 0x10400, exactly where the second begins: the table belongs to the second.
    loads = [(0x10000, 0x0, 0x400), (0x10400, 0x600, 0x100)]
    lib = _library(tmp_path / "libadjacent.so", loads, strtab=0x10400, strings_at=0x600)
    assert read_soname(lib) == "libright.so.1"


def test_a_table_inside_the_second_segment_is_read_through_the_second(tmp_path: Path) -> None:
    # 0x3000 + 0x1000 is its end; the addresses share bits (0x3000 | 0x1000 and 0x3000 ^ 0x1000 are not it).
    loads = [(0x1000, 0x0, 0x400), (0x3000, 0x600, 0x1000)]
    lib = _library(tmp_path / "libsecond.so", loads, strtab=0x3010, strings_at=0x610)
    assert read_soname(lib) == "libright.so.1"


def test_a_table_below_every_segment_is_an_error(tmp_path: Path) -> None:
    loads = [(0x1000, 0x0, 0x400), (0x3000, 0x600, 0x1000)]
    lib = _library(tmp_path / "libbelow.so", loads, strtab=0x800, strings_at=0x610)
    with pytest.raises(LibFileError, match=r"libbelow\.so: string table outside every loaded segment"):
        read_soname(lib)
