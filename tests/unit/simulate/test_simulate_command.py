"""`carve simulate` end to end through the CLI: table, JSON, --compare, and usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from driver.cli import main

KEYS = {"gpus_total", "peak_gpus_busy", "gpu_hours_busy", "pods_total", "pods_scheduled",
        "pods_never_scheduled", "mean_wait_s", "lower_bound_gpus", "packing_ratio"}
SMALL_POD = {"devices": {"requests": [{"name": "g", "firstAvailable": [
    {"name": "soft", "deviceClassName": "vgpu.carve.dev",
     "capacity": {"requests": {"memory": "4Gi", "cores": "20"}}},
    {"name": "slots", "deviceClassName": "slot.carve.dev", "count": 2},
    {"name": "mig", "deviceClassName": "mig.carve.dev"},
    {"name": "gpu", "deviceClassName": "gpu.carve.dev"}]}],
    "constraints": [{"requests": ["g/slots"], "matchAttribute": "gpu.carve.dev/parentUUID"}]}}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "cluster.yaml"
    trace = tmp_path / "trace.yaml"
    cluster.write_text(yaml.safe_dump({"nodes": [{"name": "n", "gpus": "2xA100-80GB"}]}))
    trace.write_text(yaml.safe_dump({"pods": [
        {"name": f"p{i}", "arrival": i * 10, "duration": 100, "claims": [SMALL_POD]} for i in range(4)]}))
    return cluster, trace


def test_json_output_has_every_key(files, capsys) -> None:
    cluster, trace = files
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--strategy", "soft",
                 "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= KEYS
    # Four 20% shares present at once fit one soft GPU.
    assert (report["pods_scheduled"], report["peak_gpus_busy"], report["lower_bound_gpus"]) == (4, 1, 1)


def test_compare_runs_each_strategy(files, capsys) -> None:
    cluster, trace = files
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--compare",
                 "-o", "json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert list(reports) == ["exclusive", "mig", "soft", "mps", "slots", "timeslice", "auto"]
    # Exclusive: 4 pods, 2 GPUs -> two wait. The others share, so nobody waits.
    assert reports["exclusive"]["peak_gpus_busy"] == 2
    assert reports["exclusive"]["mean_wait_s"] > 0
    for name in ("mig", "soft", "slots"):
        assert reports[name]["mean_wait_s"] == 0
        assert reports[name]["lower_bound_gpus"] == reports["exclusive"]["lower_bound_gpus"]


def test_table_output_has_one_column_per_strategy(files, capsys) -> None:
    cluster, trace = files
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--compare"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[1:] == ["exclusive", "mig", "soft", "mps", "slots", "timeslice", "auto"]
    assert any(line.startswith("packing ratio") for line in lines)
    (changes,) = [line.split()[3:] for line in lines if line.startswith("strategy changes (auto)")]
    assert changes[:-1] == ["-"] * 6 and changes[-1].isdigit()  # only auto changes strategies


def test_bad_input_is_a_usage_error_naming_the_file(files, capsys) -> None:
    cluster, trace = files
    trace.write_text("pods: [{name: p, arrival: 0, claims: []}]\n")
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("carve simulate: trace.yaml: pods[0].")


def test_pods_that_never_fit_are_explained_on_stderr(files, capsys) -> None:
    cluster, trace = files
    trace.write_text(yaml.safe_dump({"pods": [{"name": "huge", "arrival": 0, "duration": 1, "claims": [
        {"devices": {"requests": [{"name": "g", "exactly": {
            "deviceClassName": "gpu.carve.dev", "count": 3}}]}}]}]}))
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--strategy", "exclusive",
                 "-o", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["pods_never_scheduled"] == 1
    assert "pod huge fits on no node, even empty" in out.err


def test_the_objective_reaches_auto_and_bad_search_budgets_are_refused(files, capsys) -> None:
    # Two pods that each need 60% of one A100 (the trade-off of test_simulate_auto.py): --objective gpus
    # packs them on one GPU (mig), the default keeps soft's zero delay on two.
    cluster, trace = files
    sixty = {"devices": {"requests": [{"name": "g", "firstAvailable": [
        {"name": "mig", "deviceClassName": "mig.carve.dev", "selectors": [{"cel": {"expression":
            'device.capacity["gpu.carve.dev"].memory.compareTo(quantity("10Gi")) >= 0'}}]},
        {"name": "soft", "deviceClassName": "vgpu.carve.dev",
         "capacity": {"requests": {"memory": "10Gi", "cores": "60"}}}]}]}}
    trace.write_text(yaml.safe_dump({"pods": [
        {"name": f"p{i}", "arrival": i, "duration": 1000, "demand": {"memory": "10Gi", "cores": 60},
         "claims": [sixty]} for i in range(2)]}))
    peaks = {}
    for objective in ("balanced", "gpus"):
        assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--objective", objective,
                     "-o", "json"]) == 0
        auto = json.loads(capsys.readouterr().out)
        assert f"trade-off, objective {objective}" in auto["auto_why"]
        peaks[objective] = auto["peak_gpus_busy"]
    assert peaks == {"balanced": 2, "gpus": 1}
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--search-budget", "-1"]) == 2
    assert "--search-budget: -1 is not a number of runs >= 0" in capsys.readouterr().err
