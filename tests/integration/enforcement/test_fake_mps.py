"""The fake MPS control daemon and the fake libcuda's MPS client: the control commands carve uses, the
client's active thread percentage and pinned memory limit, and MPS's one-server-per-user rule."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from enforcement_harness import (
    BUILD,
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_SUCCESS,
    GI,
    MI,
    MPS_CONTROL,
    Node,
    held_client,
)

CUDA_ERROR_MPS_SERVER_NOT_READY = 807
PROBE = BUILD / "tests" / "cuda_probe"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_daemon_writes_its_pid_file_and_quits(node: Node, daemon: Path):
    pid = int((daemon / "nvidia-cuda-mps-control.pid").read_text())
    assert _pid_alive(pid)
    node.mps("quit", pipe=daemon)
    for _ in range(100):
        if not _pid_alive(pid):
            break
        time.sleep(0.05)
    assert not _pid_alive(pid)
    assert not (daemon / "control").exists()
    proc = subprocess.run(
        [str(MPS_CONTROL)],
        input="get_server_list\n",
        capture_output=True,
        text=True,
        env=node.env(CUDA_MPS_PIPE_DIRECTORY=str(daemon)),
    )
    assert proc.returncode == 1 and "Cannot find MPS control daemon" in proc.stderr
    # the fixture's own quit then finds no daemon: start one again so its teardown succeeds
    subprocess.run(
        [str(MPS_CONTROL), "-d"],
        env=node.env(CUDA_MPS_PIPE_DIRECTORY=str(daemon), CUDA_MPS_LOG_DIRECTORY=str(node.tmp / "mps-log")),
        check=True,
    )


def test_default_settings_round_trip(node: Node, daemon: Path):
    out = node.mps(
        "set_default_active_thread_percentage 40",
        "get_default_active_thread_percentage",
        "set_default_device_pinned_mem_limit 0 2G",
        "get_default_device_pinned_mem_limit 0",
        "set_default_active_thread_percentage 0",
        pipe=daemon,
    )
    assert out.splitlines() == ["40", "40", "2G", "2G", "invalid percentage 0"]


def test_client_gets_the_daemon_defaults_and_its_own_tighter_env(node: Node, daemon: Path):
    node.mps("set_default_device_pinned_mem_limit 0 2G", pipe=daemon)
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(daemon)}
    assert int(node.client("alloc", str(2 * GI), **env)) == CUDA_SUCCESS
    assert int(node.client("alloc", str(2 * GI + MI), **env)) == CUDA_ERROR_OUT_OF_MEMORY
    # The client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (what carve sets) tightens it further.
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=1G"
    assert int(node.client("alloc", str(GI + MI), **env)) == CUDA_ERROR_OUT_OF_MEMORY
    assert int(node.client("alloc", str(GI), **env)) == CUDA_SUCCESS


def test_without_a_daemon_the_mps_limits_do_not_apply(node: Node, tmp_path: Path):
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "nothing"), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1G"}
    assert int(node.client("alloc", str(2 * GI), **env)) == CUDA_SUCCESS  # fail-open, as CUDA is


def test_server_list_and_clients(node: Node, daemon: Path):
    assert node.mps("get_server_list", pipe=daemon) == ""
    with held_client(node, daemon) as client:
        servers = node.mps("get_server_list", pipe=daemon).split()
        assert len(servers) == 1
        assert node.mps(f"get_server_status {servers[0]}", pipe=daemon).strip() == "ACTIVE"
        assert node.mps(f"get_client_list {servers[0]}", pipe=daemon).split() == [str(client.pid)]


def test_a_second_user_waits_while_the_first_users_server_has_clients(node: Node, daemon: Path):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")

    def probe_as_nobody() -> dict:
        proc = subprocess.run(
            [str(PROBE)],
            env=node.env(CUDA_MPS_PIPE_DIRECTORY=str(daemon), CARVE_FAKE_MPS_WAIT_MS="300"),
            capture_output=True,
            text=True,
            user=65534,
            timeout=30,
        )
        return json.loads(proc.stdout.strip().splitlines()[-1])

    with held_client(node, daemon):
        # one server per user: root's server has a client, so nobody's cuInit waits, then gives up
        assert probe_as_nobody() == {"ok": False, "step": "cuInit", "rc": CUDA_ERROR_MPS_SERVER_NOT_READY}
    # root's client is gone: the daemon replaces the idle server with one for nobody
    assert probe_as_nobody()["ok"] is True
