"""Inventory and MIG operations through pynvml against the fake libnvidia-ml.so.1.

Every scenario runs in fresh Python processes: NVML (and the fake topology) is loaded once per
process, and MIG state must survive from one process to the next as it does on hardware.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from driver.devices.catalog import fake_gpu, models

REPO = Path(__file__).resolve().parents[3]
ALL_MODELS = ",".join(f"1x{m}" for m in models())
PRELUDE = """
import dataclasses, json, sys
from driver.gpu import discover, InventoryError
from driver.gpu.mig import create_mig_instance, destroy_mig_instance, enable_mig, list_mig_instances
def out(value):
    print(json.dumps(value, default=lambda o: dataclasses.asdict(o)))
"""


def run_py(code: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def result(code: str, env: dict):
    return json.loads(run_py(code, env).stdout.strip().splitlines()[-1])


def test_inventory_reads_every_field_of_every_model(fake_gpu_env):
    env = fake_gpu_env()
    gpus = result(f"out(discover('fake:{ALL_MODELS}', 'node-a'))", env)
    assert [g["index"] for g in gpus] == list(range(len(models())))
    assert len({g["uuid"] for g in gpus}) == len(gpus)
    for g, key in zip(gpus, models(), strict=True):
        want = fake_gpu(key, g["index"])
        assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", g["uuid"])
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", g["pci_bus_id"])
        assert g["minor"] == g["index"]
        assert (g["product"], g["memory_bytes"], g["multiprocessors"]) == (
            want.product,
            want.memory_bytes,
            want.multiprocessors,
        )
        assert (g["architecture"], g["cuda_compute_capability"]) == (
            want.architecture,
            want.cuda_compute_capability,
        )
        assert (g["driver_version"], g["cuda_driver_version"]) == ("580.95.05", "13.0")
        assert g["mig_capable"] == want.mig_capable and g["mig_enabled"] is False
        assert g["mig_instances"] == []
        got_profiles = {p["name"]: p for p in g["mig_profiles"]}
        assert set(got_profiles) == {p.name for p in want.mig_profiles}
        for p in want.mig_profiles:
            got = got_profiles[p.name]
            assert (got["id"], got["compute_slices"], got["memory_bytes"], got["multiprocessors"]) == (
                p.id,
                p.compute_slices,
                p.memory_bytes,
                p.multiprocessors,
            )
            assert got["max_instances"] == p.max_instances
            assert [(x["start"], x["size"]) for x in got["placements"]] == [
                (x.start, x.size) for x in p.placements
            ]


def test_identities_are_deterministic_per_seed(fake_gpu_env):
    code = "out([g.uuid for g in discover('fake:2xA100-80GB', 'ignored')])"
    a = result(code, fake_gpu_env(seed="node-a"))
    assert result(code, fake_gpu_env(seed="node-a")) == a
    assert set(result(code, fake_gpu_env(seed="node-b"))).isdisjoint(a)


def test_fake_seed_defaults_to_the_node_name(fake_gpu_env):
    env = fake_gpu_env()
    del env["CARVE_FAKE_SEED"]
    code = "out([g.uuid for g in discover('fake:1xT4', sys.argv[-1] if False else 'node-x')])"
    a = result(code, env)
    b = result(code.replace("node-x", "node-y"), env)
    assert a != b


def test_mig_instances_survive_a_process_restart(fake_gpu_env):
    env = fake_gpu_env(gpus="1xA100-80GB")
    created = result(
        """
        g = discover('nvml')[0]
        enable_mig(g.uuid)
        out([create_mig_instance(g.uuid, '3g.40gb', 4), create_mig_instance(g.uuid, 19, 0)])
    """,
        env,
    )
    seen = result("out(discover('nvml')[0])", env)
    assert seen["mig_enabled"] is True
    assert seen["mig_instances"] == sorted(created, key=lambda m: m["placement"]["start"])
    assert all(m["uuid"].startswith("MIG-") and m["compute_instance_id"] >= 0 for m in created)
    result(
        f"""
        g = discover('nvml')[0]
        destroy_mig_instance(g.uuid, {created[0]["gpu_instance_id"]})
        destroy_mig_instance(g.uuid, {created[0]["gpu_instance_id"]})  # gone: no-op
        out(True)
    """,
        env,
    )
    left = result("out(discover('nvml')[0].mig_instances)", env)
    assert left == [created[1]]


def test_create_is_idempotent_and_reuses_the_instance(fake_gpu_env):
    env = fake_gpu_env(gpus="1xH100-80GB")
    a, b, n = result(
        """
        g = discover('nvml')[0]
        enable_mig(g.uuid)
        a = create_mig_instance(g.uuid, '1g.10gb', 2)
        b = create_mig_instance(g.uuid, '1g.10gb', 2)
        out([a, b, len(list_mig_instances(g.uuid))])
    """,
        env,
    )
    assert a == b and n == 1


def test_overlapping_placement_is_refused_naming_gpu_and_placement(fake_gpu_env):
    env = fake_gpu_env(gpus="1xA100-40GB")
    err = result(
        """
        g = discover('nvml')[0]
        enable_mig(g.uuid)
        create_mig_instance(g.uuid, '1g.5gb', 1)
        try:
            create_mig_instance(g.uuid, '4g.20gb', 0)
        except InventoryError as e:
            out([type(e).__name__, str(e), g.uuid])
    """,
        env,
    )
    kind, message, uuid = err
    assert kind == "MigPlacementError"
    assert uuid in message and "4g.20gb at 0:4" in message and "1g.5gb at 1:1" in message


def test_mig_operations_need_mig_mode_and_known_profiles(fake_gpu_env):
    env = fake_gpu_env(gpus="1xA30,1xT4")
    errors = result(
        """
        a30, t4 = discover('nvml')
        errors = []
        for fn in (lambda: create_mig_instance(a30.uuid, '1g.6gb', 0),
                   lambda: enable_mig(t4.uuid),
                   lambda: (enable_mig(a30.uuid), create_mig_instance(a30.uuid, '9g.99gb', 0)),
                   lambda: create_mig_instance(a30.uuid, '2g.12gb', 1)):
            try:
                fn()
                errors.append(None)
            except InventoryError as e:
                errors.append([type(e).__name__, str(e)])
        out(errors)
    """,
        env,
    )
    assert errors[0][0] == "MigModeError" and "MIG mode is disabled" in errors[0][1]
    assert errors[1][0] == "MigModeError" and "no MIG support" in errors[1][1]
    assert errors[2][0] == "MigProfileError" and "no MIG profile '9g.99gb'" in errors[2][1]
    assert errors[3][0] == "MigProfileError" and "no placement at 1 (starts: 0, 2)" in errors[3][1]


RACER = PRELUDE + textwrap.dedent("""
    g = discover('nvml')[0]
    try:
        out(['ok', create_mig_instance(g.uuid, sys.argv[1], int(sys.argv[2]))])
    except InventoryError as e:
        out([type(e).__name__, str(e)])
""")


def race(env: dict, jobs: list[tuple[str, int]]) -> list[list]:
    """Start one process per (profile, start) at once; their outcomes, in job order."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, p, str(s)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p, s in jobs
    ]
    outcomes = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 0, stderr
        outcomes.append(json.loads(stdout.strip().splitlines()[-1]))
    return outcomes


def test_two_processes_creating_at_once_do_not_corrupt_state(fake_gpu_env):
    env = fake_gpu_env(gpus="1xA100-80GB")
    result("g = discover('nvml')[0]; enable_mig(g.uuid); out(True)", env)
    # Seven processes take the seven 1g placements while two more ask for placement 0 again.
    outcomes = race(env, [("1g.10gb", k) for k in range(7)] + [("1g.10gb", 0), ("1g.10gb", 0)])
    assert [o[0] for o in outcomes] == ["ok"] * 9, outcomes
    final = result("out(discover('nvml')[0].mig_instances)", env)
    assert sorted(m["placement"]["start"] for m in final) == list(range(7))
    assert len({m["gpu_instance_id"] for m in final}) == 7 and len({m["uuid"] for m in final}) == 7
    by_start = {m["placement"]["start"]: m for m in final}
    for o in outcomes:  # every process saw the instance that is really there, duplicates included
        assert by_start[o[1]["placement"]["start"]] == o[1]


def test_overlapping_requests_racing_leave_exactly_one_winner(fake_gpu_env):
    env = fake_gpu_env(gpus="1xH100-80GB")
    result("g = discover('nvml')[0]; enable_mig(g.uuid); out(True)", env)
    outcomes = race(env, [("2g.20gb", 0), ("3g.40gb", 0), ("4g.40gb", 0), ("1g.20gb", 0), ("7g.80gb", 0)])
    winners = [o[1] for o in outcomes if o[0] == "ok"]
    assert len(winners) == 1, outcomes
    assert {o[0] for o in outcomes if o[0] != "ok"} == {"MigPlacementError"}
    assert result("out(discover('nvml')[0].mig_instances)", env) == winners


def test_a_process_cannot_switch_fake_topology(fake_gpu_env):
    message = result(
        """
        discover('fake:1xA100-80GB')
        discover('fake:1xA100-80GB')  # the same topology again is fine
        try:
            discover('fake:1xT4')
        except InventoryError as e:
            out(str(e))
    """,
        fake_gpu_env(),
    )
    assert "already uses GPUs from fake:1xA100-80GB" in message and "fake:1xT4" in message


def test_production_path_reads_the_library_on_the_loader_path(fake_gpu_env):
    # `--gpus nvml` with the fake first on LD_LIBRARY_PATH: pynvml's own loading, no carve special case.
    gpus = result("out(discover('nvml'))", fake_gpu_env(gpus="2xL4"))
    assert [g["product"] for g in gpus] == ["NVIDIA L4", "NVIDIA L4"]


@pytest.mark.parametrize("spec", ["fake:3xQ9000", "fake:", "fake:0xT4", "cuda"])
def test_bad_gpus_argument_is_an_inventory_error(fake_gpu_env, spec):
    message = result(
        f"""
        try:
            discover({spec!r})
        except InventoryError as e:
            out(str(e))
    """,
        fake_gpu_env(),
    )
    assert message.startswith("--gpus")


def test_topology_of_fake_gpus_comes_through_nvml_and_a_sysfs_stand_in(fake_gpu_env, tmp_path):
    # nvmlDeviceGetMemoryAffinity: the fake host has two sockets, the first half of the GPUs on node 0.
    env = fake_gpu_env()
    gpus = result("out(discover('fake:2xA100-80GB,1xT4', 'node-a'))", env)
    assert [g["numa_node"] for g in gpus] == [0, 0, 1]
    for g in gpus:
        bus = int(g["pci_bus_id"].split(":")[1], 16)
        assert g["pcie_root"] == f"pci0000:{bus - 1:02x}"
    assert len({g["pcie_root"] for g in gpus}) == 3
    # CARVE_SYSFS_ROOT is read as the host's sysfs: here one without these devices, so no root is guessed.
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    bare = result(
        "out(discover('fake:1xT4', 'node-a'))", {**env, "CARVE_SYSFS_ROOT": str(tmp_path)}
    )
    assert bare[0]["pcie_root"] is None and bare[0]["numa_node"] == 0


def test_fake_memory_affinity_checks_its_arguments_as_nvml_h_says(fake_gpu_env):
    code = """
    import ctypes, pynvml
    discover('fake:1xT4', 'node-a')
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    fn = pynvml._nvmlGetFunctionPointer('nvmlDeviceGetMemoryAffinity')
    buf = (ctypes.c_ulong * 1)()
    out([fn(h, 0, buf, 0), fn(h, 1, None, 0), fn(h, 1, buf, 7), fn(h, 1, buf, 1), buf[0]])
    """
    invalid = 2  # NVML_ERROR_INVALID_ARGUMENT
    assert result(code, fake_gpu_env()) == [invalid, invalid, invalid, 0, 1]
