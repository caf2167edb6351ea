"""The real CUDA runtimes (PyPI cudart 12.9 and 13.x) on the fake libcuda.so.1.

A C program built against each wheel's cuda_runtime_api.h and linked to its libcudart.so.N (no nvcc, no
device code) runs the runtime's own initialisation (dark-API tables, the integrity check), then memory,
streams and events, stream-ordered allocation and a captured graph. What the fake answers is checked
against the fake's other face (NVML) and against the bytes the program wrote: kernels do not run, but
copies and memsets must round-trip (cuda-runtime-facts.md §4).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_runtime_support import Runtime, build_probe, fake_env, run_probe, runtime12, runtime13
from fakes_support import FAKE_NVML

MIB = 1 << 20
GPUS = "2xA100-80GB,1xT4"


@pytest.fixture(scope="module", params=[12, 13], ids=["cudart12", "cudart13"])
def runtime(request, fake_nvml) -> Runtime:
    subprocess.run(["make", "-s", "-C", str(FAKE_NVML.parents[2]), "build/fakes/libcuda.so.1"], check=True)
    return runtime12() if request.param == 12 else runtime13()


@pytest.fixture(scope="module")
def probe(runtime: Runtime) -> Path:
    return build_probe(runtime)


def nvml_view(env: dict[str, str]) -> list[dict[str, str]]:
    """UUIDs and PCI bus ids as the fake NVML reports them, through pynvml, in the same environment."""
    code = (
        "import json, pynvml as N; N.nvmlInit(); out = []\n"
        "for i in range(N.nvmlDeviceGetCount()):\n"
        "    h = N.nvmlDeviceGetHandleByIndex(i)\n"
        "    out.append({'uuid': N.nvmlDeviceGetUUID(h), 'pci': N.nvmlDeviceGetPciInfo(h).busId})\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def test_runtime_initialises_and_counts_the_fake_gpus(probe: Path, runtime: Runtime):
    out = run_probe(probe, ["init"], fake_env(GPUS))
    assert out["count"] == "3"
    assert out["runtime"].startswith(str(runtime.major))
    assert out["driver"] == "13000"


def test_cuda_visible_devices_is_applied_by_the_driver(probe: Path):
    out = run_probe(probe, ["init", "props"], fake_env(GPUS, CUDA_VISIBLE_DEVICES="2"))
    assert out["count"] == "1"
    assert out["dev0.name"] == "Tesla T4"


def test_device_properties_are_the_models_and_agree_with_nvml(probe: Path):
    env = fake_env(GPUS)
    out = run_probe(probe, ["props"], env)
    assert out["dev0.name"] == "NVIDIA A100-SXM4-80GB"
    assert int(out["dev0.mem"]) == 81920 * MIB
    assert out["dev0.cc"] == "8.0" and out["dev0.sms"] == "108"
    assert out["dev0.smem_optin"] == "166912"  # A100: 163 KiB opt-in shared memory per block
    assert out["dev0.l2"] == str(40 * MIB)
    assert out["dev2.name"] == "Tesla T4" and out["dev2.cc"] == "7.5" and out["dev2.sms"] == "40"
    assert out["dev2.smem_optin"] == "65536"
    assert out["dev0.max_threads"] == "1024"
    # the integrity check hashes these, so the runtime and NVML must agree on them
    for i, dev in enumerate(nvml_view(env)):
        assert out[f"dev{i}.uuid"] == dev["uuid"].removeprefix("GPU-").replace("-", "")
        domain, bus, rest = dev["pci"].split(":")
        assert out[f"dev{i}.pci"] == f"{int(domain, 16):04x}:{bus.lower()}:{rest.split('.')[0].lower()}"


def test_memory_round_trips_and_is_accounted(probe: Path, tmp_path: Path):
    out = run_probe(probe, ["memory"], fake_env(GPUS, state=tmp_path / "state"))
    assert out["roundtrip"] == "1", "64 MiB host->device->host"
    assert out["memset"] == "1", "cudaMemset touched exactly its 100 bytes"
    assert out["dtod"] == "1"
    assert out["ptr_type"] == "2" and out["ptr_device"] == "0"  # cudaMemoryTypeDevice on device 0
    assert int(out["used_by_alloc"]) == 64 * MIB, "cudaMemGetInfo's free dropped by the allocation"
    assert out["released"] == "1", "cudaFree gave it back"
    assert int(out["total"]) == 81920 * MIB


def test_streams_and_events(probe: Path):
    out = run_probe(probe, ["streams"], fake_env(GPUS))
    assert out["elapsed_ok"] == "1"
    assert out["query"] == "0" and out["equery"] == "0"  # complete after the synchronisation
    assert out["prio"] == "0 -5"


def test_stream_ordered_allocation_uses_the_pool(probe: Path, tmp_path: Path):
    out = run_probe(probe, ["async"], fake_env(GPUS, state=tmp_path / "state"))
    assert out["async_memset"] == "1"
    assert out["async_used"] == "1", "cudaMallocAsync's pool memory is device memory in use"
    assert out["async_released"] == "1", "trimming the pool gave it back"


def test_captured_graph_replays_memsets_and_copies(probe: Path):
    out = run_probe(probe, ["graph"], fake_env(GPUS))
    assert out["capturing"] == "1"
    assert out["not_run_at_capture"] == "1", "captured work runs at launch, not at capture"
    assert out["nodes"] == "2"
    assert out["replayed"] == "1"


def test_device_reset_and_other_devices(probe: Path):
    out = run_probe(probe, ["reset"], fake_env(GPUS))
    assert out["after_reset"] == "1", "the runtime works again after cudaDeviceReset"
    assert int(out["dev2_total"]) == 15360 * MIB and out["current"] == "2"


@pytest.mark.parametrize("loading", ["EAGER", "LAZY"])
def test_module_loading_modes(probe: Path, loading: str):
    out = run_probe(probe, ["init", "memory"], fake_env(GPUS, CUDA_MODULE_LOADING=loading))
    assert out["count"] == "3" and out["roundtrip"] == "1"


def test_other_processes_see_the_memory_through_nvml(probe: Path, tmp_path: Path):
    """The runtime's allocations land in the shared accounting NVML reports (CARVE_FAKE_STATE)."""
    state = tmp_path / "state"
    env = fake_env(GPUS, state=state, CARVE_PROBE_HOLD="1")
    holder = subprocess.Popen([str(probe), "hold"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.startswith("holding"), line
        code = (
            "import json, pynvml as N; N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)\n"
            "procs = N.nvmlDeviceGetComputeRunningProcesses(h)\n"
            "print(json.dumps([[p.pid, p.usedGpuMemory] for p in procs]))\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True)
        procs = json.loads(proc.stdout)
        assert [holder.pid, 96 * MIB] in procs
    finally:
        holder.kill()
        holder.wait()
