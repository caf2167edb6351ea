"""Only the driver's own libraries get the driver's entry points from `dlsym` unhooked (intercept.c,
`from_driver`: the calling library's file name begins `libcuda.so` or `libnvidia-ml.so`). A tenant's library
whose name merely begins like them (`libcuda.shim.so`, `libnvidia-ml.shim.so`) is not the driver: the
hooked names it looks up in a handle to the driver are the limiter's. Were it taken for the driver, a tenant
could name a library so and call the driver's `cuMemAlloc_v2` past the claim's quota.

The test builds the tenant's library under each name; the program loads it by path and asks it to look one
hooked name up in a handle to the driver, then prints which library the answer is in."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

# dlsym in a handle to the driver finds the driver's own export unless the limiter's dlsym answers for it
LOOKUP = """
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

const char *look_up(const char *driver, const char *name)
{
    void *h = dlopen(driver, RTLD_NOW);
    void *p = h ? dlsym(h, name) : NULL;
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "nothing";
    const char *base = strrchr(info.dli_fname, '/');
    return base ? base + 1 : info.dli_fname;
}
"""

PROGRAM = """
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    void *lib = dlopen(argv[1], RTLD_NOW);
    const char *(*look_up)(const char *, const char *) = lib ? (const char *(*)(const char *, const char *))
                                                                   dlsym(lib, "look_up") : NULL;
    if (!look_up) {
        fprintf(stderr, "%s\\n", dlerror());
        return 1;
    }
    printf("%s\\n", look_up(argv[2], argv[3]));
    return 0;
}
"""


def build(tmp_path: Path, source: str, output: Path, *flags: str) -> None:
    path = tmp_path / f"{output.name}.c"
    path.write_text(source)
    built = subprocess.run(
        ["cc", "-fPIC", "-o", str(output), str(path), *flags], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr


@pytest.mark.parametrize(
    ("library", "driver", "name", "found_in"),
    [
        # a tenant's names: hooked
        ("libcuda.shim.so", "libcuda.so.1", "cuMemAlloc_v2", "libcarve-limiter.so"),
        ("libnvidia-ml.shim.so", "libnvidia-ml.so.1", "nvmlDeviceGetMemoryInfo", "libcarve-limiter.so"),
        # the driver's own libraries' names (a vendor's libcuda.so.* beside libcuda.so.1): passed through
        ("libcuda.so.shim", "libcuda.so.1", "cuMemAlloc_v2", "libcuda.so.1"),
        ("libnvidia-ml.so.shim", "libnvidia-ml.so.1", "nvmlDeviceGetMemoryInfo", "libnvidia-ml.so.1"),
    ],
)
def test_a_library_named_like_the_driver_gets_the_hooks_unless_it_is_the_drivers(
    claim, tmp_path: Path, library: str, driver: str, name: str, found_in: str
) -> None:
    lib = tmp_path / library
    build(tmp_path, LOOKUP, lib, "-shared")
    program = tmp_path / "program"
    build(tmp_path, PROGRAM, program)
    c = claim().create(memory=64 << 20)
    proc = c.run(str(lib), driver, name, program=program, CARVE_LOG="error")
    assert proc.stdout.split() == [found_in], proc.stderr
