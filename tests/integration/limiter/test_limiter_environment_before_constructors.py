"""A CUDA call that reaches the limiter before its own constructor has run still gets the limits the
environment gives (config.c, carve_getenv: until the constructor has taken its snapshot of the environment,
the environment itself is read). That happens to a library whose constructor calls CUDA and is initialized
before the limiter: the loader runs the constructors of objects that do not depend on each other in the
reverse of their load order, so a library preloaded after the limiter runs its constructor first, and its
calls reach the limiter, which comes first in the global scope.

The library is built here: its constructor allocates the bytes `EARLY_ALLOC_BYTES` names on the fake GPU and
prints the CUresult, and the program it is loaded into (`true`) does nothing else."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from limiter_harness import FAKES, LIMITER

MIB = 1 << 20
CUDA_ERROR_OUT_OF_MEMORY = 2

# no cuda.h: the few declarations the constructor needs, with the driver API's types
EARLY = """
#include <stdio.h>
#include <stdlib.h>
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);

__attribute__((constructor)) static void alloc_in_constructor(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    const char *bytes = getenv("EARLY_ALLOC_BYTES");
    int rc = -2; /* no context */
    if (bytes && cuInit(0) == 0 && cuDeviceGet(&dev, 0) == 0 && cuDevicePrimaryCtxRetain(&ctx, dev) == 0 &&
        cuCtxSetCurrent(ctx) == 0)
        rc = cuMemAlloc_v2(&p, (size_t)strtoull(bytes, NULL, 10));
    printf("%d\\n", rc);
    fflush(stdout);
}
"""


@pytest.fixture
def early_library(tmp_path: Path) -> Path:
    source = tmp_path / "early.c"
    source.write_text(EARLY)
    library = tmp_path / "libearly.so"
    built = subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(library), str(source), f"-L{FAKES}", "-l:libcuda.so.1"],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    return library


def allocate_in_constructor(c, library: Path, nbytes: int) -> str:
    true = shutil.which("true")
    assert true is not None
    env = c.env(
        CARVE_REGION="",  # no claim: the environment's limit, per process
        CARVE_MEMORY_LIMIT="32m",
        EARLY_ALLOC_BYTES=str(nbytes),
        LD_PRELOAD=f"{LIMITER} {library}",  # the library's constructor runs before the limiter's
    )
    proc = subprocess.run([true], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_an_allocation_before_the_limiters_constructor_is_held_to_the_environments_limit(
    claim, early_library: Path
) -> None:
    c = claim()
    assert allocate_in_constructor(c, early_library, 64 * MIB) == str(CUDA_ERROR_OUT_OF_MEMORY)
    # and the limit is the environment's, not a refusal of everything
    assert allocate_in_constructor(c, early_library, 16 * MIB) == "0"
