"""The limiter loads on every glibc from 2.17, and a container whose programs cannot load it still starts.

/etc/ld.so.preload makes every dynamically linked program of the container load the limiter: a library that
needs a newer glibc than the image has would make every one of them exit at start. The build pins each
symbol to an old version (native/src/glibc_compat.h); this reads what the built library really requires.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from limiter_harness import LIMITER, require_native

BASELINE = (2, 17)


def required_glibc_versions(library) -> set[tuple[int, ...]]:
    """Every GLIBC_x.y[.z] version the library's version-needs section names."""
    if shutil.which("readelf") is None:
        pytest.fail("readelf (binutils) is needed to read the limiter's symbol versions")
    out = subprocess.run(
        ["readelf", "-W", "-V", str(library)], capture_output=True, text=True, check=True
    ).stdout
    needs = out.split("Version needs section", 1)
    assert len(needs) == 2, f"{library} has no version-needs section:\n{out}"
    return {tuple(int(x) for x in v.split(".")) for v in re.findall(r"Name: GLIBC_([0-9.]+)", needs[1])}


def test_the_limiter_needs_nothing_newer_than_glibc_2_17():
    require_native()
    versions = required_glibc_versions(LIMITER)
    assert versions, "no GLIBC_ versions found: the parse is broken"
    too_new = sorted(v for v in versions if v > BASELINE)
    assert not too_new, (
        f"{LIMITER} needs GLIBC_{'.'.join(map(str, max(too_new)))} (> 2.17): pin it in glibc_compat.h"
    )


def test_the_limiter_keeps_libdl_and_libpthread_needed_for_old_glibcs():
    # Before glibc 2.34, dlopen and pthread_create lived in libdl.so.2 and libpthread.so.0.
    require_native()
    out = subprocess.run(["readelf", "-d", str(LIMITER)], capture_output=True, text=True, check=True).stdout
    assert "[libdl.so.2]" in out and "[libpthread.so.0]" in out


@pytest.mark.parametrize("preloaded", ["limiter", "unloadable"])
def test_programs_start_whatever_the_preload_line_names(tmp_path, preloaded):
    # A static binary never reads /etc/ld.so.preload (nor does musl's loader); glibc's loader skips a library
    # it cannot load with a message. Either way the container's programs run.
    require_native()
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode
    ):
        pytest.fail("this test mounts its own /etc/ld.so.preload: it needs root and unshare -m")
    source = tmp_path / "hello.c"
    source.write_text('#include <stdio.h>\nint main(void) { puts("started"); return 0; }\n')
    static = tmp_path / "hello-static"
    built = subprocess.run(["cc", "-static", "-o", str(static), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    bogus = tmp_path / "libnot-an-elf.so"
    bogus.write_text("not a library\n")
    etc = tmp_path / "etc"  # the container's /etc: the loader's cache and the preload line
    etc.mkdir()
    if Path("/etc/ld.so.cache").exists():
        shutil.copy("/etc/ld.so.cache", etc / "ld.so.cache")
    (etc / "ld.so.preload").write_text(f"{LIMITER if preloaded == 'limiter' else bogus}\n")
    script = f'mount --bind "{etc}" /etc && "{static}" && sh -c "echo started"'
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["started", "started"], out.stderr
    if preloaded == "unloadable":  # the dynamic program did read the preload line, and went on
        assert "cannot be preloaded" in out.stderr, out.stderr
