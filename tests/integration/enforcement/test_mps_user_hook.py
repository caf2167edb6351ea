"""`carve-cdi-hook mps-user` against the fake MPS daemon: a container of one uid does not start while the
GPU's MPS server serves another uid's clients; it starts for the same uid, beside an idle server, without
a server, and (fail-open, as MPS is) when the daemon does not answer. The bundle's config.json is the
runtime's; its uid field is checked, not guessed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from enforcement_harness import HOOK, MPS_CONTROL, Node, held_client

NOBODY = 65534
GPU = "GPU-test-mps"


@pytest.fixture
def as_root():
    if os.geteuid() != 0:
        pytest.skip("runs an MPS client as another uid: needs root (CI runs as root)")


def _hook(
    node: Node, pipe: Path, uid: int | None, control: Path = MPS_CONTROL, **config
) -> subprocess.CompletedProcess:
    """The hook as the runtime runs it at createRuntime: the OCI state on stdin, config.json in the bundle."""
    bundle = node.tmp / "bundle"
    bundle.mkdir(exist_ok=True)
    process = {"user": {"uid": uid, "gid": 0}} if uid is not None else {"user": {"gid": 0}}
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.2.0", "process": process, **config}))
    state = {
        "ociVersion": "1.2.0",
        "id": "c1",
        "status": "creating",
        "pid": os.getpid(),
        "bundle": str(bundle),
    }
    return subprocess.run(
        [str(HOOK), "mps-user", "--control", str(control), "--pipe-dir", str(pipe), "--gpu", GPU],
        input=json.dumps(state),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_fake_server_runs_as_its_clients_uid(node: Node, daemon: Path, as_root):
    with held_client(node, daemon, user=NOBODY):
        (server,) = node.mps("get_server_list", pipe=daemon).split()
        status = Path(f"/proc/{server}/status").read_text().splitlines()
        uid_line = next(x for x in status if x.startswith("Uid:"))
        assert uid_line.split()[1:] == [str(NOBODY)] * 4


def test_another_uid_is_refused_while_the_server_has_clients(node: Node, daemon: Path, as_root):
    with held_client(node, daemon, user=NOBODY) as client:
        (server,) = node.mps("get_server_list", pipe=daemon).split()
        refused = _hook(node, daemon, uid=1000)
        assert refused.returncode == 1, refused.stderr
        msg = refused.stderr
        assert f"GPU {GPU}" in msg and f"(pid {server}) serves uid {NOBODY}" in msg, msg
        assert f"pids {client.pid}" in msg and "runs as uid 1000" in msg, msg
        # the server's own user is admitted
        same = _hook(node, daemon, uid=NOBODY)
        assert same.returncode == 0 and same.stderr == "", same.stderr
    # the server is idle now: the first cuInit of uid 1000 replaces it, so the container starts
    idle = _hook(node, daemon, uid=1000)
    assert idle.returncode == 0 and idle.stderr == "", idle.stderr


def test_no_server_admits_any_uid(node: Node, daemon: Path):
    assert node.mps("get_server_list", pipe=daemon) == ""
    result = _hook(node, daemon, uid=1000)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_daemon_that_does_not_answer_fails_open_with_a_warning(node: Node, tmp_path: Path):
    result = _hook(node, tmp_path / "no-daemon", uid=1000)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr and f"GPU {GPU}" in result.stderr and "unchecked" in result.stderr


def test_a_control_binary_that_hangs_is_cut_off(node: Node, tmp_path: Path):
    hang = tmp_path / "hang-control"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")
    hang.chmod(0o755)
    result = _hook(node, tmp_path, uid=1000, control=hang)
    assert result.returncode == 0 and "no reply within the hook's 15 s" in result.stderr, result.stderr


def test_a_control_binary_that_exits_at_once_fails_open(node: Node, tmp_path: Path):
    gone = tmp_path / "gone-control"
    # It closes its stdin unread: the hook's write may meet EPIPE, which must not kill the hook.
    gone.write_text("#!/bin/sh\nexec 0<&-\nexit 3\n")
    gone.chmod(0o755)
    result = _hook(node, tmp_path, uid=1000, control=gone)
    assert result.returncode == 0 and "exited with status 3" in result.stderr, result.stderr


@pytest.mark.parametrize("uid", [None, "1000", -1, 1.5, 2**32])
def test_a_config_without_a_plain_uid_is_an_error_naming_the_field(node: Node, daemon: Path, uid):
    result = _hook(node, daemon, uid=uid)
    assert result.returncode == 1
    assert '"process"."user"."uid"' in result.stderr and "config.json" in result.stderr, result.stderr


def test_bad_arguments_are_a_usage_error(node: Node, daemon: Path):
    result = subprocess.run(
        [str(HOOK), "mps-user", "--pipe-dir", "relative"],
        input="{}",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "usage: carve-cdi-hook mps-user" in result.stderr
