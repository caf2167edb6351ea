"""A CUDA program in a container built from carve's CDI spec on a real GPU node (skipped without a GPU).

carve scans the node's real driver (driver root /), builds a whole-GPU claim's spec, and
tests/support/cdi_sandbox.py applies it as a runtime would in a throwaway mount namespace: bind mounts of the
spec's driver files and device nodes into a minimal Debian-like root, the spec's hooks (native/hook with a
static ldconfig), then native/tests/cuda_probe, chroot'ed, dlopen()s libcuda.so.1 by its SONAME, creates a
context and allocates memory on the GPU.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest
from support.cdi_sandbox import image_root, run_in_spec, sandbox_available
from support.driverroot import hook_dir

from driver.cdi.spec import claim_spec
from driver.plugin.container.edits import ClaimDevice, HostLayout, claim_edits

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "native/build/tests/cuda_probe"
UID = "9e1c7a52-3b6d-4f80-a2c4-1d5e8f7b9a03"


def _gpu0_minor() -> int:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    handle, minor = ctypes.c_void_p(), ctypes.c_uint()
    assert nvml.nvmlInit_v2() == 0
    assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
    assert nvml.nvmlDeviceGetMinorNumber(handle, ctypes.byref(minor)) == 0
    return minor.value


def test_a_cuda_program_runs_in_a_container_built_from_the_spec(tmp_path):
    reason = sandbox_available()
    if reason:
        pytest.skip(f"needs mount namespaces and chroot: {reason}")
    if not PROBE.exists():
        pytest.fail(f"{PROBE} missing: run `make native`")
    layout = HostLayout.scan(Path("/"), Path("/proc"), hook_dir=hook_dir(tmp_path / "lib"))
    edits = claim_edits(layout, [ClaimDevice(f"{UID}-gpu-0", _gpu0_minor())])
    spec = claim_spec(UID, edits.devices, edits.common)
    mounts = spec["containerEdits"]["mounts"]
    libcuda = next(Path(m["hostPath"]) for m in mounts if "/libcuda.so." in m["containerPath"])
    rootfs = image_root(tmp_path / "rootfs", {"/usr/local/bin/cuda_probe": PROBE}, extra_libs=(libcuda,))
    done = run_in_spec(spec, rootfs, ["/usr/local/bin/cuda_probe"], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["devices"] >= 1, result
