"""read_ld_cache on a cache whose last string has no terminating NUL (a truncated or hostile
/etc/ld.so.cache in an image): an error naming the file, never a name cut short by one character."""

import struct
import subprocess
import sys

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


def test_a_cache_of_a_terabyte_is_refused_without_being_read_whole(tmp_path):
    # a sparse file of 1 TiB: read whole it would need a terabyte of memory; the reader stops one byte past
    # its 64 MiB bound (run with 2 GiB of address space, where reading it whole fails at once)
    cache = tmp_path / "ld.so.cache"
    with cache.open("wb") as f:
        f.truncate(1 << 40)
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from driver.plugin.container.libfiles import LibFileError, read_ld_cache\n"
        "try:\n    read_ld_cache(sys.argv[1])\nexcept LibFileError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(cache)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"{cache}: larger than {64 << 20} bytes", out.stderr[-2000:]
