"""`carve plugin --cluster kube` (the API server) and `--cluster file:<dir>` are the two clusters the flag
names; anything else is refused with the flag's name. The value comes from the command line, a string of
its own, not the literal the code compares it with: `kube` typed on the command line is the API server."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from driver.cli import CliError
from driver.cluster.kube import KubeCluster
from driver.plugin import command

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args, _rest = parser.parse_known_args(argv)
    return args


def test_kube_from_the_command_line_is_the_api_server(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    # Built at run time as argv holds it, not the module's own "kube".
    args = parse(["--cluster", "".join(["ku", "be"]), "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert isinstance(command._cluster(args), KubeCluster)


@pytest.mark.parametrize("value", ["kubernetes", "Kube", "files:/tmp/x"])
def test_another_cluster_is_refused_by_the_flags_name(tmp_path: Path, value: str) -> None:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    args = parse(["--cluster", value, "--kubeconfig", str(tmp_path / "kubeconfig")])
    with pytest.raises(CliError, match=f"--cluster '{value}': expected 'kube' or 'file:<dir>'"):
        command._cluster(args)
