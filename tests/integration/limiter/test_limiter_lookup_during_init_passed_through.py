"""A CUDA name looked up through `dlsym` while the limiter initialises is passed to the real `dlsym`, whoever
asks (intercept.c, `dlsym`: `g_initialising`). The limiter's initialisation loads the driver (`dlopen` of
libcuda.so.1), and the constructors of the libraries that loads run inside it, on the same thread. A hooked
name asked for there must not start the initialisation again: it is the one under way, and a second
`pthread_once` on it from its own thread never returns, so the process would hang before its first CUDA call.

The driver's own libraries are passed through by name as well (`from_driver`), so the library that asks here
is one the driver depends on whose name is not the driver's, as a vendor's libcuda.so.1 that is a shim over
the real driver has. The test builds both: a `libcuda.so.1` that needs `libdriver_dep.so`, whose constructor
looks up `cuMemAlloc_v2`. The program (built here, not linked to the driver) looks a hooked name up itself,
which is what starts the limiter's initialisation and so loads the driver."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from limiter_harness import LIMITER

# the constructor runs inside the limiter's dlopen of the driver; it prints what its lookup found
DEPENDENCY = """
#include <dlfcn.h>
#include <stdio.h>

__attribute__((constructor)) static void look_up_in_constructor(void)
{
    void *p = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    printf("dependency %s\\n", p ? "found" : "missing");
    fflush(stdout);
}
"""

# a driver that is only its dependency: the limiter's stand-ins answer for every CUDA call it lacks
SHIM = "int carve_test_shim_driver;\n"

PROGRAM = """
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    void *p = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    printf("program %s\\n", p ? "found" : "missing");
    return 0;
}
"""


def build(tmp_path: Path, source: str, output: Path, *flags: str) -> None:
    path = tmp_path / f"{output.name}.c"
    path.write_text(source)
    command = ["cc", "-fPIC", "-o", str(output), str(path), *flags]
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


@pytest.fixture
def shim_driver(tmp_path: Path) -> tuple[Path, Path]:
    """(the library directory with the shim libcuda.so.1 and its dependency, the program)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    build(tmp_path, DEPENDENCY, lib / "libdriver_dep.so", "-shared")
    # --no-as-needed: the shim uses nothing of its dependency, and the dependency is the point
    build(
        tmp_path,
        SHIM,
        lib / "libcuda.so.1",
        "-shared",
        "-Wl,-soname,libcuda.so.1",
        "-Wl,--no-as-needed",
        f"-L{lib}",
        "-ldriver_dep",
    )
    program = tmp_path / "look_up"
    build(tmp_path, PROGRAM, program)
    return lib, program


def test_a_driver_dependencys_lookup_during_the_limiters_initialisation_does_not_hang(
    claim, shim_driver: tuple[Path, Path]
) -> None:
    lib, program = shim_driver
    env = claim().env(CARVE_REGION="", LD_LIBRARY_PATH=str(lib), CARVE_LOG="error")
    assert env["LD_PRELOAD"] == str(LIMITER)
    # a hang is what fails: the timeout is far above the few milliseconds the process takes
    proc = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # the dependency's constructor ran inside the limiter's initialisation (before the program's lookup
    # returned) and was answered; the limiter's own export is the first `cuMemAlloc_v2` in the global scope
    assert proc.stdout.splitlines() == ["dependency found", "program found"]
