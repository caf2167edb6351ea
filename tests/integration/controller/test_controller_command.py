"""`carve controller` as a command: flag checks, and --once against the API stand-in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.partitioning import claim, mig, node_slices

from driver.cli import main
from driver.cluster.kube import KubeCluster
from driver.simulate.cluster import device_classes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "0"], "--interval 0.0: must be more than 0 seconds"),
        (["--max-changes", "0"], "--max-changes 0: must be at least 1"),
        (["--lease-duration", "1"], "--lease-duration 1: must be 2..3600 seconds"),
        (["--metrics-addr", "8080"], "--metrics-addr '8080': expected [host]:port"),
        (["--split-count", "0"], "--split-count: settings.split_count: 0 is not in 1..100"),
        (
            ["--plugin-strategy", "0=mig,1=turbo"],
            "--plugin-strategy '0=mig,1=turbo': '1=turbo': unknown strategy",
        ),
    ],
)
def test_bad_flags_are_usage_errors(args, message, capsys) -> None:
    assert main(["controller", *args]) == 2
    assert message in capsys.readouterr().err


def test_flags_have_env_twins(monkeypatch, capsys) -> None:
    monkeypatch.setenv("CARVE_MAX_CHANGES", "0")
    assert main(["controller"]) == 2
    assert "--max-changes 0" in capsys.readouterr().err


def test_once_dry_run_prints_the_plan_and_writes_nothing(apiserver, tmp_path) -> None:
    kubeconfig = apiserver.kubeconfig(tmp_path / "kubeconfig")
    api = KubeCluster.from_config(kubeconfig)
    for s in node_slices("node-a", "1xA100-80GB", "soft"):
        api.create_resource_slice(s)
    for dc in device_classes():
        apiserver.put_object("deviceclasses", dc)
    apiserver.put_claim(claim(mig("1g.10gb"), name="small-mig"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "driver.cli",
            "controller",
            "--kubeconfig",
            str(kubeconfig),
            "--once",
            "--dry-run",
            "--grace",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [(c["node"], c["gpu"], c["from"], c["to"]) for c in plan["changes"]] == [
        ("node-a", 0, "soft", "mig")
    ]
    assert plan["pending"] == {"ns/small-mig": "helped"}
    assert apiserver.objects.list("nodepartitionings") == [] and apiserver.objects.list("events") == []
