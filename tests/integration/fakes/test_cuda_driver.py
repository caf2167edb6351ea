"""The fake libcuda.so.1's driver API as frameworks use it, driven through ctypes.

Modules hold what real images name: cubins and PTX compiled by the real NVRTC 12.9 (committed under
images/, rebuilt by images/make_images.py), wrapped in fatbins and __fatBinC_Wrapper_t as cudart registers
them, and compressed with the system's liblz4/libzstd as framework fatbins are. Kernels do not run; their
modelled time shows in events and stream queries, and graphs replay it. Every entry point cuda.h names
resolves through cuGetProcAddress to the same function dlsym finds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_driver_snippets import GRAPHS, MODULES, PRELUDE, RESOLVE, TIMING, VMM
from cuda_runtime_support import fake_env
from fakes_support import NATIVE

NOT_FOUND, NOT_READY, INVALID_VALUE, INVALID_HANDLE, NOT_SUPPORTED = 500, 600, 1, 400, 801
MIB = 1 << 20
GEN = NATIVE / "fakes" / "gen_cuda_symbols.py"
IMAGES = Path(__file__).resolve().parent / "images"  # real NVRTC 12.9 output (images/make_images.py)
TABLE = NATIVE / "fakes" / "cuda" / "symbols_gen.h"


@pytest.fixture(scope="module")
def fake_cuda(fake_nvml) -> None:
    subprocess.run(["make", "-s", "-C", str(NATIVE), "build/fakes/libcuda.so.1"], check=True)


def run(code: str, gpus: str = "1xA100-80GB", state: Path | None = None, **extra: str) -> dict:
    env = fake_env(gpus, state=state, **extra)
    proc = subprocess.run([sys.executable, "-c", PRELUDE + code], env=env, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"snippet failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_modules_know_the_names_of_real_images(fake_cuda):
    r = run(MODULES, IMAGES=str(IMAGES))
    assert r["elf"] == [True, 0x50], "an sm_80 cubin of CUDA 12 (SM in e_flags' low byte)"
    assert r["scale"] == 0 and r["unknown"] == NOT_FOUND
    assert r["mangled"] == 0, "C++ names are looked up mangled"
    assert r["same_handle"]
    assert r["global"] == 0 and r["global_size"] == 37 * 4, "a global's size is its ELF symbol's"
    assert r["global_roundtrip"]
    assert r["max_threads"] == 1024 and r["binary_version"] == 80
    assert r["binary_version_abi8"] == 80, "CUDA 13 cubins keep the SM in e_flags bits 8-15"
    assert r["ptx_kernel"] == 0 and r["ptx_unknown"] == NOT_FOUND
    assert r["ptx_global"] == 0 and r["ptx_global_size"] == 37 * 4
    assert r["kernel_is_function"], "a CUkernel is a CUfunction"
    assert r["module_of_library"] == 0
    # the wrapper's fatbin holds sm_75 and sm_80 cubins: an A100 (sm_80) reads the sm_80 one
    assert r["wrapper_sm80"] == 0 and r["wrapper_not_sm75"] == NOT_FOUND
    assert r["lz4_known"] == 0 and r["lz4_unknown"] == NOT_FOUND
    assert r["zstd_known"] == 0 and r["zstd_unknown"] == NOT_FOUND
    assert r["zstd_global"] == 0 and r["zstd_global_size"] == 37 * 4
    assert r["garbage"] == 200  # CUDA_ERROR_INVALID_IMAGE
    assert r["after_unload"] == INVALID_HANDLE


def test_kernel_time_is_modelled_in_events_streams_and_graph_replays(fake_cuda):
    # 5 waves of 4 ms: 20 ms per launch
    r = run(TIMING, IMAGES=str(IMAGES), CARVE_FAKE_NS_PER_WAVE="4000000", CARVE_FAKE_QUEUE_NS="1000000000")
    assert r["stream_query_pending"] == NOT_READY
    assert r["event_query_pending"] == NOT_READY
    assert r["elapsed_pending"] == NOT_READY
    assert r["stream_query_done"] == 0
    assert 19.9 <= r["kernel_ms"] <= 21.0
    assert r["capturing"] == 1
    assert r["capture_s"] < 0.02, "captured launches do not occupy the GPU"
    assert r["nodes"] == 3
    assert 39.9 <= r["graph_ms"] <= 42.0, "the replay charges both captured kernels"
    assert r["graph_memset"], "the captured memset ran at replay"
    assert r["bad_stream"] == INVALID_HANDLE and r["bad_event"] == INVALID_HANDLE


def test_graphs_built_node_by_node_replay_and_update(fake_cuda):
    r = run(GRAPHS, IMAGES=str(IMAGES), CARVE_FAKE_QUEUE_NS="1000000000")
    assert r["types"] == [0, 2, 1]  # CU_GRAPH_NODE_TYPE_KERNEL, MEMSET, MEMCPY
    assert 5.9 <= r["ms"] <= 7.0, "2 waves of 3 ms"
    assert r["memset"] and r["memcpy"]
    assert 5.9 <= r["ms_before_update"] <= 7.0, "an executable graph is a snapshot"
    assert r["update"] == 0 and 11.9 <= r["ms_after_update"] <= 13.0
    assert 2.9 <= r["ms_exec_set"] <= 4.0
    # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
    assert r["update_topology"] == 910 and r["update_result"] == 2
    assert r["destroyed"] == INVALID_VALUE


def test_vmm_and_pools_as_pytorch_uses_them(fake_cuda, tmp_path: Path):
    r = run(VMM, state=tmp_path / "state")
    assert r["granularity"] == 2 * MIB
    assert r["reserve"] == 0, "expandable segments reserve 1.125 x the device's memory"
    assert r["reserve_takes_no_memory"]
    assert r["create_charged"] == 20 * MIB
    assert r["vmm_roundtrip"]
    assert r["retained_same"] and r["prop_device"] == 0
    assert r["unmapped_copy"] == INVALID_VALUE, "reserved but unmapped memory has no storage"
    assert r["released"]
    assert r["pool_keeps"] == 30 * MIB and r["pool_reserved"] == 30 * MIB
    assert r["pool_reuses"]
    assert r["pool_trimmed"]
    assert r["bad_pool"] == INVALID_VALUE


def table_rows() -> list[tuple[str, str, str, str]]:
    return re.findall(r"X\((\w+), (\w+), (\d+), (\d)\)", TABLE.read_text())


def test_every_entry_point_resolves_to_its_exported_function(fake_cuda):
    rows = table_rows()
    assert len(rows) > 700
    r = run(RESOLVE, ROWS=",".join(":".join(row) for row in rows))
    assert r["rows"] == len(rows)
    assert r["unresolved"] == [] and r["unexported"] == [] and r["differ"] == []
    assert r["old_abi"] == [], "old ABI names cuBLASLt and PyTorch dlsym"
    assert r["stub_rc"] == NOT_SUPPORTED
    assert r["empty"] == NOT_FOUND and r["unknown"] == NOT_FOUND and r["old_version"] == NOT_FOUND


def test_generated_table_is_current():
    """symbols_gen.h is what gen_cuda_symbols.py makes of the installed headers, when they are the version it
    was generated from; headers of another version (a toolkit in CUDA_HOME) must name nothing it lacks."""
    proc = subprocess.run([sys.executable, str(GEN)], capture_output=True, text=True, check=True)
    committed = TABLE.read_text()
    version = re.search(r"from cuda.h (\d+)", proc.stdout)
    stale = ("native/fakes/cuda/symbols_gen.h is stale: python3 native/fakes/gen_cuda_symbols.py > "
             "native/fakes/cuda/symbols_gen.h")
    assert version, proc.stdout[:200]
    if f"from cuda.h {version.group(1)} " in committed:
        assert proc.stdout == committed, stale
    else:
        # names, not versions: older headers lack some typedefs, whose version the generator then guesses
        installed = set(re.findall(r"X\((\w+), \w+, \d+, \d\)", proc.stdout))
        assert installed <= {row[0] for row in table_rows()}, stale


def test_loading_mode_follows_cuda_module_loading(fake_cuda):
    code = ("m = c_int(); ck(CU.cuModuleGetLoadingMode(byref(m)), 'mode'); out({'mode': m.value})\n")
    assert run(code)["mode"] == 2  # CU_MODULE_LAZY_LOADING
    assert run(code, CUDA_MODULE_LOADING="EAGER")["mode"] == 1


def test_cuinit_takes_no_flags_but_0(fake_cuda):
    # "Currently, the Flags parameter must be 0" (CUDA Driver API, cuInit): anything else is INVALID_VALUE
    r = run('print(json.dumps({"one": CU.cuInit(1), "high": CU.cuInit(1 << 31), "zero": CU.cuInit(0)}))')
    assert r == {"one": INVALID_VALUE, "high": INVALID_VALUE, "zero": 0}
