"""read_soname on a library whose dynamic segment says it runs past the end of the file (a truncated or
damaged driver library): the entries that are in the file are read, none past its end."""

import struct

from driver.plugin.container.libfiles import read_soname

_PT_DYNAMIC = 2


def _elf(size: int, dynamic_at: int, dynamic_size: int) -> bytes:
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"  # 64-bit, little-endian
    struct.pack_into("<Q", header, 32, 64)  # e_phoff: the program headers follow the header
    struct.pack_into("<HH", header, 54, 56, 1)  # e_phentsize, e_phnum
    phdr = struct.pack("<IIQQQQQQ", _PT_DYNAMIC, 0, dynamic_at, 0, 0, dynamic_size, 0, 0)
    data = bytearray(header + phdr + bytes(size - 64 - len(phdr)))
    for off in range(dynamic_at, size - 15, 16):  # DT_NEEDED entries to the file's end, no DT_NULL
        struct.pack_into("<qQ", data, off, 1, 0)
    return bytes(data)


def test_a_dynamic_segment_running_past_the_file_end_is_read_up_to_it(tmp_path):
    lib = tmp_path / "libcuda.so.550.54.15"
    lib.write_bytes(_elf(256, dynamic_at=128, dynamic_size=4096))  # the file ends on an entry's boundary
    assert read_soname(lib) is None  # no DT_SONAME among the entries present
