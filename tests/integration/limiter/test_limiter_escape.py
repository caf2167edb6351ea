"""A container cannot lift its quota from the inside: not by rewriting its environment before the first CUDA
call, not by starting a child with a cleared environment, and a driver that looks up its own entry points
neither reaches the hooks nor disturbs the limiter."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import CLIENT, LIMITER

from driver.limits import ClaimLimits, DeviceLimit, create_region

MIB = 1 << 20

ALLOC_9_MIB = """
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
ctx, dev, p = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
print("rc", cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(9 << 20)))
"""


def run_python(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("plugin_region", [True, False], ids=["plugin-region", "environment-only"])
def test_rewriting_the_environment_before_the_first_cuda_call_changes_nothing(claim, plugin_region):
    c = claim()
    if plugin_region:
        c.create(memory=8 * MIB)
    escape = textwrap.dedent(
        """
        import os
        for name in [n for n in os.environ if n.startswith(("CARVE_", "CUDA_DEVICE_"))]:
            del os.environ[name]  # unsetenv
        os.environ["CARVE_MEMORY_LIMIT"] = "1T"  # putenv
        os.environ["CARVE_REGION_DIR"] = "/nonexistent"
        """
    )
    out = run_python(escape + ALLOC_9_MIB, c.env(CARVE_MEMORY_LIMIT=str(8 * MIB)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["rc", "2"], out.stderr  # still CUDA_ERROR_OUT_OF_MEMORY at 8 MiB


def test_a_child_with_a_rewritten_environment_is_held_by_the_plugins_mounted_regions(claim, tmp_path):
    # The plugin mounts each claim's region at /var/run/carve/<claim-uid>/region; a private mount namespace
    # gives this test its own /run. The child's environment has no CARVE_REGION and points CARVE_REGION_DIR
    # elsewhere, as `env -i CARVE_REGION_DIR=/x app` would (ld.so.preload, not the environment, loads the
    # limiter in a container: LD_PRELOAD stands in for it here).
    if shutil.which("unshare") is None or subprocess.run(
        ["unshare", "-rm", "true"], capture_output=True
    ).returncode != 0:
        pytest.skip("needs unshare and a mount namespace (user namespaces or root)")
    c = claim()
    uuid = json.loads(c.run("uuids").stdout)[0]
    region = tmp_path / "mounted-region"
    mounted = "/var/run/carve/claim-uid/region"
    create_region(region, ClaimLimits(devices=(DeviceLimit(8 * MIB, 0, uuid=uuid),), region_path=mounted))
    env = {k: v for k, v in c.env().items() if not k.startswith("CARVE_") or k.startswith("CARVE_FAKE_")}
    env["CARVE_REGION_DIR"] = str(tmp_path / "elsewhere")
    script = (
        "mount -t tmpfs tmpfs /run && mkdir -p /run/carve/claim-uid && "
        f'cp "{region}" /run/carve/claim-uid/region && exec "{CLIENT}" alloc {9 * MIB}'
    )
    out = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2", out.stderr  # OUT_OF_MEMORY: the mounted region's 8 MiB hold


def test_the_drivers_lookups_of_its_own_entry_points_get_the_driver_not_the_hooks(claim):
    # The fake libcuda looks up cuMemAlloc_v2 on its own handle from its constructor (while it is loaded)
    # and again later; both answers must be its own function. The limiter keeps working afterwards.
    c = claim().create(memory=8 * MIB)
    script = textwrap.dedent(
        f"""
        import ctypes
        cuda = ctypes.CDLL("libcuda.so.1")
        hook = ctypes.cast(ctypes.CDLL("{LIMITER}").cuMemAlloc_v2, ctypes.c_void_p).value
        seen_by_app = ctypes.cast(cuda.cuMemAlloc_v2, ctypes.c_void_p).value
        cuda.carveFakeCudaCtorLookup.restype = ctypes.c_void_p
        cuda.carveFakeCudaSelfLookup.restype = ctypes.c_void_p
        at_load = cuda.carveFakeCudaCtorLookup()
        later = cuda.carveFakeCudaSelfLookup(b"cuMemAlloc_v2")
        print("lookups", int(seen_by_app == hook), int(at_load == later), int(later not in (None, hook)))
        """
    )
    out = run_python(script + ALLOC_9_MIB, c.env(CARVE_FAKE_CTOR_LOOKUP="cuMemAlloc_v2"))
    assert out.returncode == 0, out.stderr
    # the application gets the hook; the driver, both times, its own function; the quota still holds
    assert out.stdout.split() == ["lookups", "1", "1", "1", "rc", "2"], out.stderr
