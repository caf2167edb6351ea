"""Shared-library metadata read from files: the entries of a glibc `ld.so.cache` and an ELF SONAME.

Both readers take untrusted bytes (a driver root, a container's cache in tests) and return plain values;
a malformed file is a `LibFileError`, never a crash or a read past the end.
"""

from __future__ import annotations

import struct
from pathlib import Path

# glibc's new cache format (the only one written since glibc 2.32): a 48-byte header, then 24-byte entries
# whose key (library name) and value (path) are offsets from the header's start into a string table.
_NEW_MAGIC = b"glibc-ld.so.cache1.1"
_NEW_HEADER = struct.Struct("<20sII B3x I 12x")  # magic+version, nlibs, len_strings, flags, extension
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
# The old format ("ld.so-1.7.0", 12-byte entries) may precede the new one in caches of older glibc.
_OLD_MAGIC = b"ld.so-1.7.0"
_OLD_HEADER = struct.Struct("<12sI")
_OLD_ENTRY_SIZE = 12
_MAX_CACHE = 64 << 20


class LibFileError(Exception):
    """A cache or ELF file that cannot be read; the message names the file."""


def _cstring(data: bytes, offset: int, what: Path) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise LibFileError(f"{what}: string offset {offset} outside the file")
    return data[offset:end].decode("utf-8", "surrogateescape")


def read_ld_cache(path: Path) -> list[tuple[str, str]]:
    """(library name, path) pairs of an ld.so.cache, in the file's order (the loader's preference)."""
    path = Path(path)
    try:
        with path.open("rb") as f:  # one byte past the bound tells a larger file, which is not read whole
            data = f.read(_MAX_CACHE + 1)
    except OSError as e:
        raise LibFileError(f"{path}: {e.strerror}") from None
    if len(data) > _MAX_CACHE:
        raise LibFileError(f"{path}: larger than {_MAX_CACHE} bytes")
    start = 0
    if data.startswith(_OLD_MAGIC):
        if len(data) < _OLD_HEADER.size:
            raise LibFileError(f"{path}: truncated header")
        _, nlibs = _OLD_HEADER.unpack_from(data)
        start = _OLD_HEADER.size + nlibs * _OLD_ENTRY_SIZE
        start = (start + 7) & ~7  # the new header is aligned like its 64-bit fields
    if len(data) < start + _NEW_HEADER.size or data[start : start + len(_NEW_MAGIC)] != _NEW_MAGIC:
        raise LibFileError(f"{path}: not a glibc ld.so.cache (format 1.1)")
    _, nlibs, _, _, _ = _NEW_HEADER.unpack_from(data, start)
    first = start + _NEW_HEADER.size
    if first + nlibs * _NEW_ENTRY.size > len(data):
        raise LibFileError(f"{path}: {nlibs} entries do not fit in {len(data)} bytes")
    entries = []
    for i in range(nlibs):
        _, key, value, _, _ = _NEW_ENTRY.unpack_from(data, first + i * _NEW_ENTRY.size)
        entries.append((_cstring(data, start + key, path), _cstring(data, start + value, path)))
    return entries


_DT_SONAME, _DT_STRTAB, _PT_DYNAMIC, _PT_LOAD = 14, 5, 2, 1


def read_soname(path: Path) -> str | None:
    """The DT_SONAME of a 64-bit little-endian ELF shared object; None when it has none."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_CACHE)
    except OSError as e:
        raise LibFileError(f"{path}: {e.strerror}") from None
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] != 2 or data[5] != 1:
        raise LibFileError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    loads, dynamic = [], None
    for i in range(phnum):
        off = phoff + i * phentsize
        if off + 56 > len(data):
            raise LibFileError(f"{path}: truncated program headers")
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, off)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return None
    soname = strtab = None
    for off in range(dynamic[0], min(dynamic[0] + dynamic[1], len(data) - 15), 16):
        tag, value = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == _DT_SONAME:
            soname = value
        elif tag == _DT_STRTAB:
            strtab = value
    if soname is None or strtab is None:
        return None
    # DT_STRTAB is a virtual address: map it to a file offset through the segment that holds it.
    for vaddr, offset, size in loads:
        if vaddr <= strtab < vaddr + size:
            return _cstring(data, offset + (strtab - vaddr) + soname, path)
    raise LibFileError(f"{path}: string table outside every loaded segment")
