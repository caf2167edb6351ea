"""`carve device-plugin` and `carve scheduler-extender`: bad flags are one-line usage errors (exit 2) before
anything starts, and every flag has its CARVE_* twin."""

from __future__ import annotations

import pytest

from driver.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["device-plugin"], "--node-name is required"),
        (["device-plugin", "--node-name", "n", "--cdi-delivery", "env"], "--cdi-delivery 'env'"),
        (["device-plugin", "--node-name", "n", "--resource-name", "gpu"], "--resource-name 'gpu'"),
        (["device-plugin", "--node-name", "n", "--split-count", "0"], "--split-count 0"),
        (["device-plugin", "--node-name", "n", "--node-config", "/nonexistent.json"], "--node-config"),
        (["scheduler-extender", "--addr", "nope"], "--addr 'nope'"),
        (["scheduler-extender", "--gpu-scheduler-policy", "random"], "--gpu-scheduler-policy 'random'"),
        (["scheduler-extender", "--default-cores", "101"], "--default-cores"),
        (["scheduler-extender", "--default-priority", "urgent"], "--default-priority 'urgent'"),
        (["scheduler-extender", "--webhook-addr", ":8443"], "--webhook-cert-file"),
    ],
)
def test_bad_flags_are_usage_errors(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_per_node_split_count_override(tmp_path, monkeypatch):
    from driver.legacy.command import split_count

    config = tmp_path / "node-config.json"
    config.write_text('{"gpu-3": {"splitCount": 4}}')
    import argparse

    args = argparse.Namespace(split_count=10, node_config=str(config), node_name="gpu-3")
    assert split_count(args) == 4
    args.node_name = "gpu-4"
    assert split_count(args) == 10


def test_env_twin_sets_the_flag(monkeypatch, capsys):
    monkeypatch.setenv("CARVE_ADDR", "bogus")
    assert main(["scheduler-extender"]) == 2
    assert "--addr 'bogus'" in capsys.readouterr().err


def test_the_extender_listens_on_loopback_unless_told_otherwise(monkeypatch):
    # its HTTP API is unauthenticated: only the scheduler in the same pod may reach it by default
    import argparse

    from driver.legacy.extender.command import add_arguments

    monkeypatch.delenv("CARVE_ADDR", raising=False)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).addr == "127.0.0.1:8888"
    assert parser.parse_args(["--addr", ":8888"]).addr == ":8888"
