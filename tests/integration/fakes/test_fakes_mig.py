"""MIG through the fake NVML: profiles and placements as the reference tables, creation rules as the
driver's, state shared across processes and restarts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fakes_support import NATIVE, PRELUDE, load_reference

# fake model key -> reference GPU key (native/fakes/common/models.c)
MIG_MODELS = {"A30": "A30-24GB", "A100-40GB": "A100-40GB", "A100-80GB": "A100-80GB", "H100-80GB": "H100-80GB",
              "H100-NVL": "H100-NVL-94GB", "H200-141GB": "H200-141GB", "B200": "B200-180GB",
              "RTX-PRO-6000": "RTX-PRO-6000-Blackwell-96GB"}

PROFILES = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
res = []
for idx in range(N.NVML_GPU_INSTANCE_PROFILE_COUNT):
    try:
        p = N.nvmlDeviceGetGpuInstanceProfileInfo(h, idx)
    except N.NVMLError_NotSupported:
        continue
    v1 = N.nvmlDeviceGetGpuInstanceProfileInfo(h, idx, version=1)
    assert (v1.id, v1.memorySizeMB, v1.sliceCount) == (p.id, p.memorySizeMB, p.sliceCount)
    arr = (N.c_nvmlGpuInstancePlacement_t * 16)()
    cnt = ctypes.c_uint(0)
    N.nvmlDeviceGetGpuInstancePossiblePlacements(h, p.id, arr, ctypes.byref(cnt))
    res.append(dict(index=idx, id=p.id, name=p.name.decode() if isinstance(p.name, bytes) else p.name,
        memory_mib=p.memorySizeMB, compute_slices=p.sliceCount, sm_count=p.multiprocessorCount,
        max_instances=p.instanceCount, engines=[p.copyEngineCount, p.decoderCount, p.encoderCount,
        p.jpegCount, p.ofaCount], placements=[[arr[k].start, arr[k].size] for k in range(cnt.value)]))
out(res)
"""


def _index(text: str) -> int:
    return int(re.search(r"\((\d+)\)", text).group(1))


@pytest.mark.parametrize("model", sorted(MIG_MODELS))
def test_profiles_and_placements_match_the_reference(fake_run, model):
    ref = load_reference()["gpus"][MIG_MODELS[model]]["gpu_instance_profiles"]
    got = {p["index"]: p for p in fake_run(PROFILES, gpus=f"1x{model}")}
    assert sorted(got) == sorted(_index(r["nvml_profile_index"]) for r in ref)
    for r in ref:
        p = got[_index(r["nvml_profile_index"])]
        assert p["id"] == r["profile_id"] and p["name"] == f"MIG {r['name']}", r["name"]
        assert p["compute_slices"] == r["compute_slices"] and p["max_instances"] == r["max_instances"]
        assert p["placements"] == [[x["start"], x["size"]] for x in r["placements"]], r["name"]
        if r["memory_mib"] is not None:  # B200 3g/4g/7g are estimates (see gen_mig_tables.py)
            assert p["memory_mib"] == r["memory_mib"], r["name"]
        sm = r["sm_count"]["SXM5"] if isinstance(r["sm_count"], dict) else r["sm_count"]
        if sm is not None:
            assert p["sm_count"] == sm, r["name"]
        known = [r["engines"][e] for e in ("copy", "decoder", "encoder", "jpeg", "ofa")]
        assert all(k is None or k == g for k, g in zip(known, p["engines"], strict=True)), r["name"]


def test_committed_table_is_the_generator_output():
    gen = subprocess.run([sys.executable, str(NATIVE / "fakes" / "gen_mig_tables.py")], check=True,
                         capture_output=True, text=True).stdout
    assert gen == (NATIVE / "fakes" / "common" / "mig_tables.c").read_text()


CREATE = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE)
def place(profile, start, size):
    p = N.c_nvmlGpuInstancePlacement_t(); p.start = start; p.size = size
    try:
        gi = N.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile, ctypes.byref(p))  # pynvml wants byref
        return N.nvmlGpuInstanceGetInfo(gi).id
    except N.NVMLError as e:
        return type(e).__name__
"""


def with_create(snippet: str) -> str:
    """The MIG-enabling prelude followed by a test's snippet."""
    return CREATE + textwrap.dedent(snippet)


def test_overlapping_and_invalid_placements_are_refused(fake_run, state_file):
    result = fake_run(with_create("""
        res = [place(9, 0, 4)]            # 3g.40gb at 0:4
        res.append(place(5, 0, 4))        # 4g.40gb over it
        res.append(place(14, 2, 2))       # 2g.20gb inside it
        res.append(place(14, 1, 2))       # not a 2g placement
        res.append(place(77, 0, 1))       # no such profile
        res.append(place(14, 4, 2))       # free: fits
        res.append(N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19))  # 1g.10gb: slots 6 only
        res.append(place(20, 6, 1))       # 1g.10gb+me at 6
        res.append(place(19, 6, 1))       # slot 6 now taken
        out(res)
        """), state=state_file)
    assert result == [1, "NVMLError_InsufficientResources", "NVMLError_InsufficientResources",
                      "NVMLError_InvalidArgument", "NVMLError_InvalidArgument", 5, 1, 13,
                      "NVMLError_InsufficientResources"]


def test_automatic_placement_follows_the_driver(fake_run):
    result = fake_run(with_create("""
        def auto(profile):
            try:
                i = N.nvmlGpuInstanceGetInfo(N.nvmlDeviceCreateGpuInstance(h, profile))
                return [i.placement.start, i.placement.size]
            except N.NVMLError as e:
                return type(e).__name__
        out([auto(p) for p in (19, 14, 5)])
        """), gpus="1xA100-40GB")
    # nvidia-smi mig -cgi 19,14,5 on A100-40GB: 1g at 6:1, 2g at 4:2, 4g at 0:4
    assert result == [[6, 1], [4, 2], [0, 4]]


def test_small_instances_first_can_block_a_3g(fake_run):
    result = fake_run(with_create("""
        res = []
        for p in (19, 19, 14, 9):
            try:
                N.nvmlDeviceCreateGpuInstance(h, p); res.append("ok")
            except N.NVMLError as e:
                res.append(type(e).__name__)
        out(res)
        """), gpus="1xA100-40GB")
    assert result == ["ok", "ok", "ok", "NVMLError_InsufficientResources"]


def test_gpu_instance_with_compute_instance_is_in_use(fake_run):
    result = fake_run(with_create("""
        gi = N.nvmlDeviceCreateGpuInstance(h, 9)
        prof = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                                                             N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        ci = N.nvmlGpuInstanceCreateComputeInstance(gi, prof.id)
        name = prof.name.decode() if isinstance(prof.name, bytes) else prof.name
        res = [prof.sliceCount, prof.multiprocessorCount, name]
        try:
            N.nvmlGpuInstanceDestroy(gi)
        except N.NVMLError as e:
            res.append(type(e).__name__)
        N.nvmlComputeInstanceDestroy(ci)
        N.nvmlGpuInstanceDestroy(gi)
        res.append(N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 9))
        out(res)
        """))
    assert result == [3, 42, "MIG 3g.40gb", "NVMLError_InUse", 2]


STEP = CREATE + """
step = sys.argv[1] if len(sys.argv) > 1 else os.environ["STEP"]
def mig_devices():
    res = []
    for i in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except N.NVMLError_NotFound:
            continue
        res.append([N.nvmlDeviceGetUUID(m), N.nvmlDeviceGetName(m), N.nvmlDeviceGetMemoryInfo(m).total >> 20,
                    N.nvmlDeviceGetGpuInstanceId(m), N.nvmlDeviceGetComputeInstanceId(m)])
    return res
if step == "create":
    gi = N.nvmlDeviceCreateGpuInstance(h, 14)
    N.nvmlGpuInstanceCreateComputeInstance(gi, N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)
    out(mig_devices())
elif step == "list":
    out(mig_devices())
else:
    for i in range(15):
        try:
            gi = N.nvmlDeviceGetGpuInstanceById(h, i)
        except N.NVMLError_NotFound:
            continue
        cis = (N.c_nvmlComputeInstance_t * 8)(); cnt = ctypes.c_uint(0)
        two = N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE
        N.nvmlGpuInstanceGetComputeInstances(gi, two, cis, ctypes.byref(cnt))
        for k in range(cnt.value):
            N.nvmlComputeInstanceDestroy(cis[k])
        N.nvmlGpuInstanceDestroy(gi)
    out(mig_devices())
"""


def test_mig_instances_survive_a_process_restart(fake_run, state_file):
    created = fake_run(STEP, state=state_file, STEP="create")
    listed = fake_run(STEP, state=state_file, STEP="list")
    assert len(created) == 1 and listed == created
    uuid, name, mib, gi_id, ci_id = created[0]
    assert uuid.startswith("MIG-") and name == "NVIDIA A100-SXM4-80GB MIG 2g.20gb" and mib == 19968
    assert (gi_id, ci_id) == (5, 0)  # 2g at 4:2 is node 5 of the placement tree
    assert fake_run(STEP, state=state_file, STEP="destroy") == []
    assert fake_run(STEP, state=state_file, STEP="list") == []
    # Without a state file nothing persists.
    fake_run(STEP, STEP="create")
    assert fake_run(STEP, STEP="list") == []


RACE = CREATE + """
start = float(os.environ["START_AT"])
while time.time() < start:
    pass
mine = []
for _ in range(200):
    try:
        mine.append(N.nvmlGpuInstanceGetInfo(N.nvmlDeviceCreateGpuInstance(h, 19)).placement.start)
    except N.NVMLError_InsufficientResources:
        break
out(mine)
"""


def test_concurrent_creators_never_share_a_placement(fake_nvml, state_file, fake_run):
    for _round in range(3):
        state_file.unlink(missing_ok=True)
        fake_run("N.nvmlInit(); N.nvmlDeviceSetMigMode(N.nvmlDeviceGetHandleByIndex(0), 1); out(0)",
                 state=state_file)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CARVE_FAKE_")}
        env.update(CARVE_FAKE_GPUS="1xA100-80GB", CARVE_FAKE_STATE=str(state_file),
                   START_AT=str(time.time() + 0.5))
        procs = [subprocess.Popen([sys.executable, "-c", PRELUDE + RACE], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(3)]
        results = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=60)
            assert p.returncode == 0, stderr
            results.append(json.loads(stdout.strip().splitlines()[-1]))
        starts = [s for r in results for s in r]
        assert sorted(starts) == list(range(7)), results
        listed = fake_run("""
            N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
            arr = (N.c_nvmlGpuInstance_t * 8)(); cnt = ctypes.c_uint(0)
            N.nvmlDeviceGetGpuInstances(h, 19, arr, ctypes.byref(cnt))
            out(sorted(N.nvmlGpuInstanceGetInfo(arr[k]).id for k in range(cnt.value)))
            """, state=state_file)
        assert listed == list(range(7, 14))


def test_state_file_is_private(fake_run, state_file: Path):
    fake_run("N.nvmlInit(); out(0)", state=state_file)
    assert state_file.stat().st_mode & 0o777 == 0o600


def test_a_reboot_drops_instances_and_hopper_mig_mode(fake_run, state_file):
    create = with_create("""
        N.nvmlDeviceCreateGpuInstance(h, 19)
        h1 = N.nvmlDeviceGetHandleByIndex(1)
        N.nvmlDeviceSetMigMode(h1, N.NVML_DEVICE_MIG_ENABLE)
        N.nvmlDeviceCreateGpuInstance(h1, 19)
        out(0)
        """)
    look = """
        N.nvmlInit()
        res = []
        for i in range(2):
            h = N.nvmlDeviceGetHandleByIndex(i)
            mode = N.nvmlDeviceGetMigMode(h)
            res.append([mode, N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) if mode[0] else None])
        out(res)
        """
    fake_run(create, gpus="1xA100-80GB,1xH100-80GB", state=state_file)
    assert fake_run(look, gpus="1xA100-80GB,1xH100-80GB", state=state_file) == [[[1, 1], 6], [[1, 1], 6]]
    with open(state_file, "r+b") as f:  # another kernel boot id (offset 16 of the state header)
        f.seek(16)
        f.write(b"0" * 36)
    # Ampere keeps MIG mode (InfoROM), Hopper loses it (driver state); instances are gone on both.
    assert fake_run(look, gpus="1xA100-80GB,1xH100-80GB", state=state_file) == [[[1, 1], 7], [[0, 0], None]]


CAPS = """
import pathlib
root = pathlib.Path(os.environ["CARVE_FAKE_PROC_ROOT"])
def files():
    base = root / "driver/nvidia/capabilities"
    return sorted(str(p.relative_to(base)) + " " + p.read_text().split("\\n")[0]
                  for p in base.rglob("access")) if base.exists() else []
h = N.nvmlDeviceGetHandleByIndex(1)
N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE)
gi = N.nvmlDeviceCreateGpuInstance(h, 9)
gi_id = N.nvmlGpuInstanceGetInfo(gi).id
ci = N.nvmlGpuInstanceCreateComputeInstance(gi, N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)
created = files()
devices = (root / "devices").read_text()
N.nvmlComputeInstanceDestroy(ci)
after_ci = files()
N.nvmlGpuInstanceDestroy(gi)
out([gi_id, created, after_ci, files(), "237 nvidia-caps" in devices.split("Block devices")[0]])
"""


def test_capability_files_follow_instances_under_the_fake_proc_root(fake_run, tmp_path):
    proc = tmp_path / "proc"
    gi_id, created, after_ci, after_gi, major_listed = fake_run(
        with_create(CAPS), gpus="2xA100-80GB", CARVE_FAKE_PROC_ROOT=str(proc)
    )
    gi = 3 + 1 * 135 + gi_id * 9  # the driver's mig-minors numbering for GPU minor 1
    assert created == [
        f"gpu1/mig/gi{gi_id}/access DeviceFileMinor: {gi}",
        f"gpu1/mig/gi{gi_id}/ci0/access DeviceFileMinor: {gi + 1}",
    ]
    assert after_ci == created[:1] and after_gi == [] and major_listed

