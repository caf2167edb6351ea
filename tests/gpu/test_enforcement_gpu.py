"""The driver memory backend and MPS on a real GPU (docs/enforcement.md).

- driver: a fresh cgroup v2 directory, `carve-cdi-hook memory-limits` run as the runtime would (OCI state
  with the pid of a process in that cgroup), then a CUDA process of that cgroup with no limiter loaded: an
  allocation under the hard limit succeeds, one past it fails with CUDA_ERROR_OUT_OF_MEMORY, and
  cuMemGetInfo reports the partition. Skipped where the driver has no limits API (NOT_SUPPORTED), the
  host has no cgroup v2, or the test is not root (setting limits needs root).
- MPS: a control daemon in a temp pipe directory and a client with a pinned device memory limit, refused
  past it. Skipped without nvidia-cuda-mps-control.
Without a GPU every case here is skipped by tests/gpu/conftest.py.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "native/build/carve-cdi-hook"
PROBE = Path(__file__).resolve().parent / "cuda_probe.py"
CGROUP_ROOT = Path("/sys/fs/cgroup")
GI = 1024**3
CUDA_ERROR_OUT_OF_MEMORY = 2


def _nvml_path() -> str:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libnvidia-ml.so.1" in line and "=>" in line:
            return line.split("=>", 1)[1].strip()
    pytest.skip("libnvidia-ml.so.1 not in the ld cache")


def _first_gpu() -> tuple[str, bool]:
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    from driver.gpu.nvml import memory_limits_supported

    return uuid, memory_limits_supported(handle)


@pytest.fixture
def cgroup():
    if os.geteuid() != 0:
        pytest.skip("setting the driver's memory limits needs root")
    if not (CGROUP_ROOT / "cgroup.controllers").exists():
        pytest.skip("no cgroup v2 hierarchy at /sys/fs/cgroup")
    path = CGROUP_ROOT / f"carve-gpu-test-{os.getpid()}"
    path.mkdir()
    try:
        yield path
    finally:
        for _ in range(50):
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _in_cgroup(cgroup: Path, argv: list[str]) -> list[str]:
    return ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *argv]


def test_driver_partition_holds_a_process_without_the_limiter(cgroup: Path):
    uuid, supported = _first_gpu()
    if not supported:
        pytest.skip("this driver has no per-cgroup memory limits (CUDA 13.4 generation drivers)")
    nvml = _nvml_path()
    holder = subprocess.Popen(_in_cgroup(cgroup, ["sleep", "600"]))
    time.sleep(0.2)
    record = Path(tempfile.mkdtemp())
    common = [str(HOOK), "memory-limits", "--nvml", nvml, "--record", str(record)]
    limit = ["--limit", f"{uuid}:{GI}:{2 * GI}"]
    state = json.dumps({"ociVersion": "1.2.0", "id": "gpu-test", "pid": holder.pid, "bundle": "/"})
    try:
        set_ = subprocess.run([*common, *limit], input=state, capture_output=True, text=True, timeout=60)
        assert set_.returncode == 0, set_.stderr
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        env["CUDA_VISIBLE_DEVICES"] = uuid
        proc = subprocess.run(
            _in_cgroup(cgroup, [sys.executable, str(PROBE), "memory", str(GI), str(GI + GI // 2)]),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["ok_rc"] == 0, result
        assert result["over_rc"] == CUDA_ERROR_OUT_OF_MEMORY, result
        assert result["total"] <= 2 * GI, result
    finally:
        holder.kill()
        holder.wait()
        subprocess.run([*common, "--clear", *limit], input=state, capture_output=True, text=True, timeout=60)
        shutil.rmtree(record, ignore_errors=True)


def test_mps_client_is_held_by_its_pinned_memory_limit():
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        pytest.skip("nvidia-cuda-mps-control not installed")
    uuid, _ = _first_gpu()
    pipe = Path(tempfile.mkdtemp(prefix="carve-mps-"))
    logs = Path(tempfile.mkdtemp(prefix="carve-mps-log-"))
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(logs))
    env["CUDA_VISIBLE_DEVICES"] = uuid
    started = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    try:
        client = dict(env, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=2G", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50")
        client.pop("LD_PRELOAD", None)
        proc = subprocess.run(
            [sys.executable, str(PROBE), "memory", str(GI), str(2 * GI)],
            env=client,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["ok_rc"] == 0 and result["over_rc"] == CUDA_ERROR_OUT_OF_MEMORY, result
        servers = subprocess.run(
            [control], input="get_server_list\n", env=env, capture_output=True, text=True
        )
        assert servers.stdout.split(), "the client ran without an MPS server"
    finally:
        subprocess.run([control], input="quit\n", env=env, capture_output=True, text=True, timeout=60)
        shutil.rmtree(pipe, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)


def test_fake_library_is_not_mistaken_for_a_driver():
    # Guard for the two cases above: they must never run on the fake NVML (conftest skips without a GPU).
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    assert not hasattr(lib, "carveFakeVersion")
