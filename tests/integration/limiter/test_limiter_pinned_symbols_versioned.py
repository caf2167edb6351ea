"""Each libc symbol the build pins (native/src/glibc_compat.h, CARVE_PIN) is referenced at glibc's base
version of the architecture, GLIBC_2.2.5 on x86_64 and GLIBC_2.17 on aarch64, so that the dynamic linker
binds the same definition on every glibc from 2.17 on. An unversioned reference would bind to whatever a
given glibc makes of it (the default version where there is one: dlopen@GLIBC_2.34 on a new one, while on
an old one it lives in libdl), and a reference at a newer version would not load on an old glibc
(test_limiter_glibc.py checks what the library needs; this, what each pinned reference names)."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess

import pytest
from limiter_harness import LIMITER, REPO, require_native

BASE = {"x86_64": "GLIBC_2.2.5", "aarch64": "GLIBC_2.17"}


def pinned_names() -> set[str]:
    header = (REPO / "native" / "src" / "glibc_compat.h").read_text()
    return set(re.findall(r"^CARVE_PIN\((\w+)\);", header, flags=re.MULTILINE))


def undefined_references(library) -> dict[str, str]:
    """name -> version ("" when unversioned) of every symbol the library takes from elsewhere."""
    if shutil.which("readelf") is None:
        pytest.fail("readelf (binutils) is needed to read the limiter's symbol versions")
    out = subprocess.run(
        ["readelf", "-W", "--dyn-syms", str(library)], capture_output=True, text=True, check=True
    ).stdout
    refs = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[6] == "UND" and fields[7]:
            name, _, version = fields[7].partition("@")
            refs[name] = version
    return refs


def test_every_pinned_symbol_is_referenced_at_the_base_version() -> None:
    require_native()
    base = BASE.get(platform.machine())
    if base is None:
        pytest.fail(f"glibc_compat.h pins symbols on x86_64 and aarch64 only, not {platform.machine()}")
    pinned = pinned_names()
    refs = undefined_references(LIMITER)
    used = {name: refs[name] for name in pinned if name in refs}
    assert len(used) >= 10, (pinned, refs)  # dlopen, pthread_create, __xstat, ...: the parse found them
    assert used == dict.fromkeys(used, base), used
