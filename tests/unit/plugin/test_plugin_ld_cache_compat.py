"""An ld.so.cache in glibc's compat layout (older ldconfig, `-c compat`): the old format's header and its
12-byte entries first, then the format 1.1 cache at the next 8-byte boundary, whose string offsets count from
its own header. read_ld_cache finds the new cache past any number of old entries and reads its entries; a
file cut inside the old header is an error naming the file."""

from __future__ import annotations

import struct

import pytest

from driver.plugin.container.libfiles import LibFileError, read_ld_cache

OLD_HEADER = struct.Struct("<12sI")  # "ld.so-1.7.0\0", nlibs
OLD_ENTRY = struct.Struct("<iII")  # flags, key, value
NEW_HEADER = struct.Struct("<20sII B3x I 12x")
NEW_ENTRY = struct.Struct("<iIIIQ")
ENTRIES = [("libcuda.so.1", "/usr/lib64/libcuda.so.1"), ("libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1")]


def _new_cache(entries: list[tuple[str, str]]) -> bytes:
    base = NEW_HEADER.size + NEW_ENTRY.size * len(entries)
    strings, table = b"", b""
    for name, path in entries:
        key = base + len(strings)
        strings += name.encode() + b"\0"
        value = base + len(strings)
        strings += path.encode() + b"\0"
        table += NEW_ENTRY.pack(0x0303, key, value, 0, 0)
    return NEW_HEADER.pack(b"glibc-ld.so.cache1.1", len(entries), len(strings), 2, 0) + table + strings


def _compat_cache(old_entries: int) -> bytes:
    old = OLD_HEADER.pack(b"ld.so-1.7.0", old_entries) + OLD_ENTRY.pack(1, 0, 0) * old_entries
    pad = -len(old) % 8
    return old + b"\0" * pad + _new_cache(ENTRIES)


@pytest.mark.parametrize("old_entries", range(9))  # old parts of 16 to 112 bytes, each padding, 12-byte steps
def test_the_new_cache_after_the_old_entries_is_read(tmp_path, old_entries):
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(_compat_cache(old_entries))
    assert read_ld_cache(cache) == ENTRIES


def test_an_old_format_only_cache_is_not_a_format_1_1_cache(tmp_path):
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(OLD_HEADER.pack(b"ld.so-1.7.0", 2) + OLD_ENTRY.pack(1, 0, 0) * 2 + b"\0" * 64)
    with pytest.raises(LibFileError, match=r"ld\.so\.cache: not a glibc ld\.so\.cache \(format 1\.1\)"):
        read_ld_cache(cache)


def test_an_old_header_with_nothing_after_it_is_not_a_format_1_1_cache(tmp_path):
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(OLD_HEADER.pack(b"ld.so-1.7.0", 0))  # whole, not truncated: no new cache follows
    with pytest.raises(LibFileError, match=r"ld\.so\.cache: not a glibc ld\.so\.cache \(format 1\.1\)"):
        read_ld_cache(cache)


@pytest.mark.parametrize("size", [11, 12, 15])
def test_a_cache_cut_inside_the_old_header_is_an_error_naming_the_file(tmp_path, size):
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(_compat_cache(1)[:size])
    with pytest.raises(LibFileError, match=r"ld\.so\.cache: truncated header"):
        read_ld_cache(cache)
