"""`carve plugin` flags from the outside: bad values are one-line usage errors (exit 2) before anything
starts, and every flag has its CARVE_* environment twin."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.plugin_harness import FAKE_GPUS, REPO, FakeNode, PluginProcess


def run_plugin(node: FakeNode, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "driver.cli", "plugin", *node.args("exclusive"), *extra],
        env={**os.environ, **(env or {})},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--strategy", "bogus", "unknown strategy 'bogus'"),
        ("--strategy", "*A100*=mig,T4;=soft", "'T4;=soft': selector 'T4;' is neither"),
        ("--healthz-addr", "nonsense", "--healthz-addr 'nonsense'"),
        ("--split-count", "0", "split_count: 0"),
        ("--soft-context-reserve", "lots", "--soft-context-reserve: 'lots' is not a Kubernetes quantity"),
        ("--soft-context-reserve", "0.5", "must be a whole number of bytes >= 0"),
        ("--k8s-version", "9.9", "unsupported Kubernetes version '9.9'"),
        ("--publish-interval", "0", "--publish-interval"),
        ("--health-taint-effect", "Evict", "--health-taint-effect: 'Evict' is not one of NoSchedule"),
        ("--health-lost-effect", "", "--health-lost-effect: '' is not one of"),
        ("--health-ignore-xids", "13,x", "--health-ignore-xids: 'x' is not an XID number"),
        ("--health-recovery-seconds", "-1", "--health-recovery-seconds -1.0: must not be negative"),
        ("--health-interval", "0", "--health-interval 0.0: must be more than 0 seconds"),
        ("--mps-shm-dir", "/", "--mps-shm-dir '/': expected an absolute host directory other than /"),
        ("--mps-shm-dir", "run/shm", "--mps-shm-dir 'run/shm': expected an absolute host directory"),
    ],
)
def test_bad_flag_is_a_one_line_usage_error(node, flag, value, expected):
    out = run_plugin(node, flag, value)
    assert out.returncode == 2, out.stderr
    assert expected in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (node.registry_dir / "gpu.carve.dev-reg.sock").exists()


def test_unreadable_kubeconfig_is_a_usage_error(node, tmp_path):
    out = run_plugin(node, "--cluster", "kube", "--kubeconfig", str(tmp_path / "absent"))
    assert out.returncode == 2 and out.stderr.startswith("carve plugin: --kubeconfig: ")


def test_every_path_flag_has_an_env_twin(node, kubelet):
    # Only the env says where things go; the flags of the harness are left out.
    env = {
        "CARVE_NODE_NAME": node.node_name,
        "CARVE_GPUS": FAKE_GPUS,
        "CARVE_STRATEGY": "1=soft,exclusive",
        "CARVE_CLUSTER": f"file:{node.cluster_dir}",
        "CARVE_PLUGIN_DIR": str(node.plugin_dir),
        "CARVE_REGISTRY_DIR": str(node.registry_dir),
        "CARVE_CDI_DIR": str(node.cdi_dir),
        "CARVE_DRIVER_ROOT": str(node.driver_root),
        "CARVE_LIMITER_DIR": str(node.limiter_dir),
        "CARVE_K8S_VERSION": "1.36",
    }
    plugin = PluginProcess(node, "unused", env=env)
    plugin.node = _NoArgs(node)
    plugin.start()
    try:
        assert kubelet.get_info().endpoint == str(node.plugin_dir / "dra.sock")
        assert node.device("vgpu") == "gpu-1"
    finally:
        plugin.stop()


class _NoArgs:
    """A FakeNode whose command line is empty, so only the environment configures the plugin."""

    def __init__(self, node: FakeNode):
        self._node = node

    def __getattr__(self, name):
        return getattr(self._node, name)

    def args(self, strategy: str, *extra: str) -> list[str]:
        return list(extra)
