"""read_ld_cache on a cache whose last string has no terminating NUL (a truncated or hostile
/etc/ld.so.cache in an image): an error naming the file, never a name cut short by one character."""

import struct

import pytest

from driver.plugin.container.libfiles import LibFileError, read_ld_cache

HEADER = struct.Struct("<20sII B3x I 12x")
ENTRY = struct.Struct("<iIIIQ")


def _cache(strings: bytes) -> bytes:
    first = HEADER.size + ENTRY.size
    header = HEADER.pack(b"glibc-ld.so.cache1.1", 1, len(strings), 0, 0)
    name, path = first, first + strings.index(b"\0") + 1
    return header + ENTRY.pack(1, name, path, 0, 0) + strings


def test_a_terminated_entry_is_read(tmp_path):
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(_cache(b"libcuda.so.1\0/usr/lib/libcuda.so.1\0"))
    assert read_ld_cache(cache) == [("libcuda.so.1", "/usr/lib/libcuda.so.1")]


def test_a_string_running_to_the_end_of_the_file_is_an_error(tmp_path):
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(_cache(b"libcuda.so.1\0/usr/lib/libcuda.so.1"))
    with pytest.raises(LibFileError, match=r"ld\.so\.cache: string offset \d+ outside the file"):
        read_ld_cache(cache)
