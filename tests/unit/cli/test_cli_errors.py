"""`carve`'s own edge: env twins checked like their flags, one boolean form, --log-level, --version,
help with defaults, YAML and quantity errors with a place, and no traceback on a closed pipe."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from driver.cli import SUBCOMMANDS, build_parser, main

REPO = Path(__file__).resolve().parents[3]


def test_a_bad_int_twin_names_the_variable_even_with_help(monkeypatch, capsys) -> None:
    monkeypatch.setenv("CARVE_SPLIT_COUNT", "abc")
    assert main(["simulate", "--help"]) == 2
    err = capsys.readouterr().err
    assert "CARVE_SPLIT_COUNT='abc'" in err and "--split-count" in err
    assert "Traceback" not in err


def test_a_twin_outside_its_choices_is_refused(monkeypatch, capsys) -> None:
    monkeypatch.setenv("CARVE_OUTPUT", "xml")
    assert main(["inspect", "--gpus", "fake:1xT4"]) == 2
    err = capsys.readouterr().err
    assert "CARVE_OUTPUT='xml'" in err and "table, json, yaml" in err


@pytest.mark.parametrize("raw", ["maybe", "2", ""])
def test_a_boolean_twin_takes_only_true_or_false(monkeypatch, capsys, raw) -> None:
    monkeypatch.setenv("CARVE_LEADER_ELECT", raw)
    assert main(["controller", "--help"]) == 2
    assert "CARVE_LEADER_ELECT" in capsys.readouterr().err


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("FALSE", False), ("1", True), ("off", False)])
def test_a_boolean_twin_sets_the_default(monkeypatch, raw, expected) -> None:
    monkeypatch.setenv("CARVE_LEADER_ELECT", raw)
    args = build_parser("controller").parse_args(["controller"])
    assert args.leader_elect is expected


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for name in SUBCOMMANDS:
        parser = build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out.append((name, sub.choices[name]))
    return out


def test_every_boolean_flag_has_one_form() -> None:
    """--x / --no-x everywhere: no switch-only flags and no flags taking the words true/false."""
    for name, parser in _parsers():
        for action in parser._actions:
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
                pytest.fail(f"carve {name} {action.option_strings}: use argparse.BooleanOptionalAction")
            if action.choices is not None and set(action.choices) == {"true", "false"}:
                pytest.fail(f"carve {name} {action.option_strings}: a boolean taking true/false")


def test_every_log_level_is_checked(capsys) -> None:
    seen = 0
    for name, parser in _parsers():
        for action in parser._actions:
            if "--log-level" in action.option_strings:
                seen += 1
                assert tuple(action.choices) == ("error", "warn", "info", "debug"), name
    assert seen >= 4
    with pytest.raises(SystemExit) as exit_info:
        main(["controller", "--log-level", "verbose"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'verbose'" in capsys.readouterr().err


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == "carve 0.1.0"


def test_help_shows_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["controller", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 30.0)" in out  # --interval
    assert "--leader-elect, --no-leader-elect" in out and "(default: true)" in out


def test_a_yaml_error_has_line_and_column(tmp_path, capsys) -> None:
    bad = tmp_path / "cluster.yaml"
    bad.write_text("nodes:\n- name: n\n  gpus: [1xT4\n")
    trace = tmp_path / "trace.yaml"
    trace.write_text("generate: {pods: 1}\n")
    assert main(["simulate", "--cluster", str(bad), "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert "cluster.yaml:4:1: invalid YAML" in err


def test_a_memory_quantity_in_a_trace_names_field_and_form(tmp_path, capsys) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes:\n- name: n\n  gpus: 1xA100-80GB\n")
    trace = tmp_path / "trace.yaml"
    trace.write_text(
        "pods:\n- name: p\n  arrival: 0\n  duration: 10\n  claims:\n  - devices:\n      requests:\n"
        "      - name: g\n        exactly:\n          deviceClassName: vgpu.carve.dev\n"
        "          capacity: {requests: {memory: 4GB}}\n"
    )
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert "requests[0].exactly.capacity.requests.memory: '4GB' is not a quantity" in err
    assert "Ki" in err  # the allowed suffixes


def test_a_closed_pipe_is_not_a_traceback() -> None:
    # `carve inspect | head -1`: the reader leaves after one line of a long table.
    code = (
        "import sys; from driver.cli import main\n"
        "sys.exit(main(['inspect', '--gpus', 'fake:8xA100-80GB', '-o', 'yaml']))"
    )
    carve = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    assert carve.stdout is not None
    carve.stdout.readline()
    carve.stdout.close()
    _, err = carve.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()


def test_a_broken_kubeconfig_is_named_with_line_and_column(tmp_path, capsys) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("clusters: [\n")
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert f"carve status: {kubeconfig}:2:1: invalid YAML" in err and "Traceback" not in err
