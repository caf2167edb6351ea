"""read_soname on an ELF file whose program header table runs past the file's end (a truncated or hostile
library in an image): an error naming the file, never a struct.error traceback; a table that ends exactly
at the file's end is read."""

from __future__ import annotations

import struct

import pytest

from driver.plugin.container.libfiles import LibFileError, read_soname

PHDR = struct.Struct("<IIQQQQQQ")  # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align


def _elf(phnum: int, present: int) -> bytes:
    """A 64-bit little-endian ELF header announcing `phnum` program headers at offset 64, followed by
    `present` bytes of them (PT_NOTE entries: no dynamic section)."""
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, PHDR.size, phnum, 0, 0, 0)
    assert len(header) == 64
    table = PHDR.pack(4, 4, 0, 0, 0, 0, 0, 4) * phnum
    return header + table[:present]


def test_a_table_ending_at_the_files_end_is_read(tmp_path):
    lib = tmp_path / "libx.so.1"
    lib.write_bytes(_elf(3, 3 * PHDR.size))
    assert read_soname(lib) is None  # read through, no dynamic section


@pytest.mark.parametrize("present", [0, PHDR.size - 1, 2 * PHDR.size + 55])
def test_a_table_past_the_files_end_is_an_error_naming_it(tmp_path, present):
    lib = tmp_path / "libx.so.1"
    lib.write_bytes(_elf(3, present))
    with pytest.raises(LibFileError, match=r"libx\.so\.1: truncated program headers"):
        read_soname(lib)
