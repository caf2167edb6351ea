"""The fake NVML describes every emulated model as a real driver would, through unmodified pynvml."""

from __future__ import annotations

import re

import pytest

MIB = 1024 * 1024

# key: (product name, memory MiB, SMs, compute capability, NVML architecture, PCI device id, MIG capable)
MODELS = {
    "T4": ("Tesla T4", 15360, 40, (7, 5), 6, 0x1EB810DE, False),
    "L4": ("NVIDIA L4", 23034, 58, (8, 9), 8, 0x27B810DE, False),
    "A10": ("NVIDIA A10", 23028, 72, (8, 6), 7, 0x223610DE, False),
    "A30": ("NVIDIA A30", 24576, 56, (8, 0), 7, 0x20B710DE, True),
    "A100-40GB": ("NVIDIA A100-SXM4-40GB", 40960, 108, (8, 0), 7, 0x20B010DE, True),
    "A100-80GB": ("NVIDIA A100-SXM4-80GB", 81920, 108, (8, 0), 7, 0x20B210DE, True),
    "H100-80GB": ("NVIDIA H100 80GB HBM3", 81559, 132, (9, 0), 9, 0x233010DE, True),
    "H100-NVL": ("NVIDIA H100 NVL", 95830, 132, (9, 0), 9, 0x232110DE, True),
    "H200-141GB": ("NVIDIA H200", 143771, 132, (9, 0), 9, 0x233510DE, True),
    "B200": ("NVIDIA B200", 183359, 148, (10, 0), 10, 0x290110DE, True),
    "RTX-PRO-6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 188, (12, 0), 10, 0x2BB510DE,
                     True),
}

DESCRIBE = """
N.nvmlInit()
res = []
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    pci = N.nvmlDeviceGetPciInfo(h)
    try:
        mig = N.nvmlDeviceGetMigMode(h)
    except N.NVMLError_NotSupported:
        mig = None
    res.append(dict(name=N.nvmlDeviceGetName(h), uuid=N.nvmlDeviceGetUUID(h), index=N.nvmlDeviceGetIndex(h),
        minor=N.nvmlDeviceGetMinorNumber(h), total=N.nvmlDeviceGetMemoryInfo(h).total,
        total_v2=N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2).total,
        sms=N.nvmlDeviceGetAttributes(h).multiprocessorCount, cc=N.nvmlDeviceGetCudaComputeCapability(h),
        arch=N.nvmlDeviceGetArchitecture(h), pci_id=pci.pciDeviceId, bus_id=pci.busId, mig=mig,
        by_uuid=N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(N.nvmlDeviceGetUUID(h))),
        by_pci=N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(pci.busId))))
out(dict(gpus=res, driver=N.nvmlSystemGetDriverVersion(), cuda=N.nvmlSystemGetCudaDriverVersion_v2(),
         fake=LIB.carveFakeVersion()))
"""


def test_every_model_reports_its_hardware_facts(fake_run):
    spec = ",".join(f"1x{key}" for key in MODELS)
    result = fake_run(DESCRIBE, gpus=spec)
    assert len(result["gpus"]) == len(MODELS)
    for i, (key, gpu) in enumerate(zip(MODELS, result["gpus"], strict=True)):
        name, mib, sms, cc, arch, pci_id, mig_capable = MODELS[key]
        assert (gpu["name"], gpu["total"], gpu["sms"], tuple(gpu["cc"]), gpu["arch"], gpu["pci_id"]) == \
            (name, mib * MIB, sms, cc, arch, pci_id), key
        assert gpu["total_v2"] == gpu["total"]
        assert (gpu["index"], gpu["minor"], gpu["by_uuid"], gpu["by_pci"]) == (i, i, i, i)
        assert gpu["mig"] == ([0, 0] if mig_capable else None), key
    assert result["driver"] == "580.95.05" and result["cuda"] == 13000 and result["fake"] >= 1


def test_counts_in_the_topology_repeat_models(fake_run):
    result = fake_run(DESCRIBE, gpus="2xA100-80GB, 1xT4")
    assert [g["name"] for g in result["gpus"]] == ["NVIDIA A100-SXM4-80GB"] * 2 + ["Tesla T4"]


def test_uuids_and_bus_ids_are_deterministic_per_seed(fake_run):
    first = fake_run(DESCRIBE, gpus="3xL4", seed="node-a")["gpus"]
    again = fake_run(DESCRIBE, gpus="3xL4", seed="node-a")["gpus"]
    other = fake_run(DESCRIBE, gpus="3xL4", seed="node-b")["gpus"]
    by_node_name = fake_run(DESCRIBE, gpus="3xL4", seed=None, NODE_NAME="node-a")["gpus"]
    def ids_of(gpus):
        return [(g["uuid"], g["bus_id"]) for g in gpus]

    ids = ids_of(first)
    assert ids == ids_of(again) == ids_of(by_node_name)
    assert {g["uuid"] for g in other}.isdisjoint({g["uuid"] for g in first})
    assert len({u for u, _ in ids}) == 3 and len({b for _, b in ids}) == 3
    for uuid, bus in ids:
        assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid)
        assert re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", bus)


def test_unknown_model_fails_init_with_one_clear_message(fake_run):
    proc = fake_run("""
        for _ in range(2):
            try:
                N.nvmlInit()
            except N.NVMLError as e:
                print(type(e).__name__)
        """, gpus="2xA100-80GB,1xV100", expect_fail=True)
    assert proc.returncode == 0
    assert proc.stdout.split() == ["NVMLError_Unknown", "NVMLError_Unknown"]
    lines = [line for line in proc.stderr.splitlines() if "CARVE_FAKE_GPUS" in line]
    assert len(lines) == 1
    assert "'V100'" in lines[0] and "A100-80GB" in lines[0] and "H200-141GB" in lines[0]


def test_calls_before_init_are_uninitialized_and_missing_functions_do_not_exist(fake_run):
    result = fake_run("""
        N._LoadNvmlLibrary()
        res = {}
        try:
            N.nvmlDeviceGetCount()
        except N.NVMLError as e:
            res["count"] = type(e).__name__
        N.nvmlInit()
        try:
            N.nvmlDeviceGetPowerUsage(N.nvmlDeviceGetHandleByIndex(0))
        except N.NVMLError as e:
            res["power"] = type(e).__name__
        N.nvmlShutdown()
        try:
            N.nvmlDeviceGetHandleByIndex(0)
        except N.NVMLError as e:
            res["after_shutdown"] = type(e).__name__
        out(res)
        """)
    assert result == {"count": "NVMLError_Uninitialized", "power": "NVMLError_NotSupported",
                      "after_shutdown": "NVMLError_Uninitialized"}


@pytest.mark.parametrize("call, expected", [
    ("N.nvmlDeviceGetHandleByIndex(5)", "NVMLError_InvalidArgument"),
    ("N.nvmlDeviceGetName(ctypes.cast(ctypes.c_void_p(16), N.c_nvmlDevice_t))", "NVMLError_InvalidArgument"),
    ("N.nvmlDeviceGetHandleByUUID(b'GPU-00000000-0000-0000-0000-000000000000')", "NVMLError_NotFound"),
    ("N.nvmlDeviceGetMigMode(h1)", "NVMLError_NotSupported"),
    ("N.nvmlDeviceGetMemoryInfo(h0, version=1)", "NVMLError_ArgumentVersionMismatch"),
    ("N.nvmlDeviceGetGpuInstanceProfileInfo(h0, 18)", "NVMLError_InvalidArgument"),
    ("N.nvmlDeviceGetGpuInstanceProfileInfo(h0, 10)", "NVMLError_NotSupported"),
    ("N.nvmlDeviceCreateGpuInstance(h0, 19)", "NVMLError_NotSupported"),
])
def test_bad_calls_get_nvml_error_codes(fake_run, call, expected):
    result = fake_run(f"""
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        try:
            {call}
            out("no error")
        except N.NVMLError as e:
            out(type(e).__name__)
        """, gpus="1xA100-80GB,1xT4")
    assert result == expected


def test_small_buffers_get_insufficient_size_with_the_needed_length(fake_run):
    result = fake_run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        fn = LIB.nvmlDeviceGetName
        buf = ctypes.create_string_buffer(8)
        rc_small = fn(h, buf, ctypes.c_uint(8))
        rc_null = fn(h, None, ctypes.c_uint(96))
        cnt = ctypes.c_uint(1)
        rc_place = LIB.nvmlDeviceGetGpuInstancePossiblePlacements_v2(
            h, 19, (N.c_nvmlGpuInstancePlacement_t * 1)(), ctypes.byref(cnt))
        out([rc_small, rc_null, rc_place, cnt.value])
        """)
    assert result == [7, 2, 7, 7]  # INSUFFICIENT_SIZE, INVALID_ARGUMENT, INSUFFICIENT_SIZE, 7 placements
