"""`carve inspect` and `carve slices` as a user runs them: real processes, fake GPUs, exit codes."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from driver.devices import limits_for, validate_slices

REPO = Path(__file__).resolve().parents[3]
MIXED = "fake:2xA100-80GB,1xT4"


# Exactly what the `carve` console script runs.
ENTRY = "import sys; from driver.cli import main; sys.exit(main())"


def carve(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_slices_of_a_mixed_node_validate(fake_gpu_env, version):
    proc = carve(
        "slices",
        "--node-name",
        "n1",
        "--gpus",
        MIXED,
        "--strategy",
        "0=mig,1=soft,2=exclusive",
        "--k8s-version",
        version,
        "-o",
        "yaml",
        env=fake_gpu_env(),
    )
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    validate_slices(doc["items"], limits_for(version))
    for item in doc["items"]:
        kubernetes_validate.validate(item, f"{version}.0", strict=True)
    names = {d["name"] for s in doc["items"] for d in s["spec"].get("devices", [])}
    assert {"gpu-0", "gpu-0-mig-1g10gb-3", "gpu-1", "gpu-2"} <= names
    if version != "1.36":  # soft and mig need alpha gates there: say so, on stderr
        assert "DRAConsumableCapacity" in proc.stderr and "DRAPartitionableDevices" in proc.stderr


def test_slices_json_with_split_count(fake_gpu_env):
    proc = carve(
        "slices",
        "--node-name",
        "n1",
        "--gpus",
        "fake:1xL4",
        "--strategy",
        "slots",
        "--split-count",
        "4",
        "-o",
        "json",
        env=fake_gpu_env(),
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [d["name"] for d in doc["items"][0]["spec"]["devices"]] == [f"gpu-0-slot-{k}" for k in range(4)]


def test_a_rule_for_a_gpu_the_node_lacks_is_a_warning(fake_gpu_env):
    # One value serves every node: an index or model this node does not have is not an error (issue 18).
    proc = carve(
        "slices", "--node-name", "n1", "--gpus", MIXED, "--strategy", "5=soft,*B200*=mig", env=fake_gpu_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert "rule '5=soft' matches no GPU" in proc.stderr and "rule '*B200*=mig' matches no GPU" in proc.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--gpus", "fake:2xA100-80GB,1xQ9000"], "unknown GPU model 'Q9000'"),
        (["--gpus", MIXED, "--strategy", "0=mig;1=soft"], "'0=mig;1=soft'"),
        (["--gpus", MIXED, "--k8s-version", "1.29"], "unsupported Kubernetes version '1.29'"),
        (["--gpus", MIXED, "--split-count", "0"], "split_count"),
        (["--gpus", MIXED, "--generation", "-1"], "pool generation -1: must not be negative"),
        (["--gpus", MIXED, "--node-name", "Node_1"], "node name 'Node_1': not a DNS subdomain"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(fake_gpu_env, args, fragment):
    line = one_line_error(carve("slices", "--node-name", "n1", *args, env=fake_gpu_env()))
    assert line.startswith("carve slices: ") and fragment in line


def test_inspect_prints_a_table_and_json(fake_gpu_env):
    env = fake_gpu_env()
    table = carve("inspect", "--gpus", MIXED, env=env)
    assert table.returncode == 0, table.stderr
    assert "NVIDIA A100-SXM4-80GB" in table.stdout and "Tesla T4" in table.stdout
    assert "1g.10gbx7" in table.stdout
    doc = json.loads(carve("inspect", "--gpus", MIXED, "-o", "json", "--node-name", "n1", env=env).stdout)
    assert doc["node"] == "n1" and [g["index"] for g in doc["gpus"]] == [0, 1, 2]
    assert (
        yaml.safe_load(carve("inspect", "--gpus", MIXED, "-o", "yaml", "--node-name", "n1", env=env).stdout)
        == doc
    )


def _real_nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_real_nvml_present(), reason="an NVIDIA driver is installed here: NVML is not missing")
def test_without_nvml_inspect_says_so_and_suggests_fake_gpus():
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    line = one_line_error(carve("inspect", env=env))
    assert "NVML (libnvidia-ml.so.1) not found" in line and "--gpus fake:" in line
    line = one_line_error(carve("slices", "--node-name", "n1", env=env))
    assert "--gpus fake:" in line


def test_slices_with_one_strategy_for_a_mixed_node_show_the_fallback(fake_gpu_env):
    proc = carve(
        "slices",
        "--node-name",
        "n1",
        "--gpus",
        "fake:1xT4,1xA100-80GB",
        "--strategy",
        "mig",
        "-o",
        "json",
        env=fake_gpu_env(),
    )
    assert proc.returncode == 0, proc.stderr
    types: dict[str, set[str]] = {}
    for s in json.loads(proc.stdout)["items"]:
        for d in s["spec"]["devices"]:
            a = {k: next(iter(v.values())) for k, v in d["attributes"].items()}
            types.setdefault(a["productName"], set()).add(a["type"])
    assert types == {"Tesla T4": {"vgpu"}, "NVIDIA A100-SXM4-80GB": {"gpu", "mig"}}
    assert "gpu-0 (Tesla T4) has no MIG support: rule 'mig' gives mig" in proc.stderr
    assert "--fallback-strategy soft" in proc.stderr


def test_slices_refuse_a_malformed_rule_naming_it(fake_gpu_env):
    proc = carve("slices", "--gpus", MIXED, "--strategy", "*A100*=mig,T4=mg", env=fake_gpu_env())
    assert proc.returncode == 2
    assert "'T4=mg': unknown strategy 'mg'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
