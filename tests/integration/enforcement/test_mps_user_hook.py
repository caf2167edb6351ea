"""`carve-cdi-hook mps-user` against the fake MPS daemon: a container of one uid does not start while the
GPU's MPS server serves another uid's clients; it starts for the same uid, beside an idle server, without
a server, and (fail-open, as MPS is) when the daemon does not answer. The bundle's config.json is the
runtime's; its uid field is checked, not guessed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from enforcement_harness import CLIENT, CUDA_SUCCESS, HOOK, MI, MPS_CONTROL, Node, held_client

from driver.plugin.mps.daemon import RECORD_FILE, start_time

NOBODY = 65534
GPU = "GPU-test-mps"


@pytest.fixture
def as_root():
    if os.geteuid() != 0:
        pytest.skip("runs an MPS client as another uid: needs root (CI runs as root)")


def _hook(
    node: Node,
    pipe: Path,
    uid: int | None,
    control: Path = MPS_CONTROL,
    state_dir: Path | None = None,
    pid: int | None = None,
    container_id: str = "c1",
    wait: bool = True,
    **config,
):
    """The hook as the runtime runs it at createRuntime: the OCI state on stdin, config.json in the bundle
    (one bundle per container id); `wait=False` returns the running process (stdin already written)."""
    bundle = node.tmp / f"bundle-{container_id}"
    bundle.mkdir(exist_ok=True)
    process = {"user": {"uid": uid, "gid": 0}} if uid is not None else {"user": {"gid": 0}}
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.2.0", "process": process, **config}))
    state = {
        "ociVersion": "1.2.0",
        "id": container_id,
        "status": "creating",
        "pid": pid or os.getpid(),
        "bundle": str(bundle),
    }
    args = [str(HOOK), "mps-user", "--control", str(control), "--pipe-dir", str(pipe), "--gpu", GPU]
    args += ["--state-dir", str(state_dir)] if state_dir else []
    if not wait:
        proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        proc.stdin.write(json.dumps(state))
        proc.stdin.close()
        return proc
    return subprocess.run(args, input=json.dumps(state), capture_output=True, text=True, timeout=60)


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


# --- the plugin's state directory: the daemon record (peer check) and the uid lease (issue 30) -----------


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def inits() -> Iterator[list[subprocess.Popen]]:
    """Stand-ins for containers' init processes (the OCI state's pid): kill one to end its container."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def _init(inits: list[subprocess.Popen]) -> int:
    inits.append(subprocess.Popen(["sleep", "600"]))
    return inits[-1].pid


def _record(state_dir: Path, pid: int) -> None:
    """What the plugin writes for the daemon it runs (driver/plugin/mps/daemon.py)."""
    (state_dir / RECORD_FILE).write_text(f"{pid} {start_time(pid)}\n")


def _daemon_pid(pipe: Path) -> int:
    # The test's own daemon (fixture `daemon`); the plugin never reads this file.
    return int((pipe / "nvidia-cuda-mps-control.pid").read_text())


def test_the_hook_ignores_a_control_socket_that_is_not_the_daemons(node: Node, state_dir: Path, inits):
    """Issue 32, attack 6: a listener at <pipe>/control that is not the daemon the plugin recorded answers
    get_server_list with 64 copies of pid 1 and never get_client_list. Its word is not believed: the
    container starts at once, with a warning, instead of waiting 10 s per pid."""
    pipe = Path(tempfile.mkdtemp(prefix="carve-forge-"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(pipe / "control"))
    listener.listen(64)
    held: list[socket.socket] = []

    def forge() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            line = conn.recv(512)
            if line.startswith(b"get_server_list"):
                conn.sendall(b"1\n" * 64)
                conn.close()
            else:
                held.append(conn)  # never answered

    threading.Thread(target=forge, daemon=True).start()
    _record(state_dir, _init(inits))  # the plugin's daemon: some other process
    try:
        started = time.monotonic()
        result = _hook(node, pipe, uid=1000, state_dir=state_dir, pid=_init(inits))
        took = time.monotonic() - started
    finally:
        listener.close()
        shutil.rmtree(pipe, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    assert took < 5, took
    assert "not believed" in result.stderr and "not the plugin's daemon" in result.stderr, result.stderr


def test_the_recorded_daemons_word_is_believed(node: Node, daemon: Path, state_dir: Path, inits, as_root):
    _record(state_dir, _daemon_pid(daemon))
    with held_client(node, daemon, user=NOBODY):
        refused = _hook(node, daemon, uid=1000, state_dir=state_dir, pid=_init(inits))
    assert refused.returncode == 1, refused.stderr
    assert f"serves uid {NOBODY}" in refused.stderr and "not believed" not in refused.stderr, refused.stderr


def test_many_uids_at_once_admit_one_uid(node: Node, daemon: Path, state_dir: Path, inits, as_root):
    """Issue 30: 24 containers of 4 uids created in the same instant on one GPU. Exactly one uid gets in
    (the lease is taken under a lock), every refusal names it, and the admitted containers' clients all
    attach at once. When those containers are gone, another uid gets the GPU."""
    _record(state_dir, _daemon_pid(daemon))
    uids = [1000 + i % 4 for i in range(24)]
    procs = [
        _hook(node, daemon, uid=u, state_dir=state_dir, pid=_init(inits), container_id=f"c{i}", wait=False)
        for i, u in enumerate(uids)
    ]
    results = [(u, p.wait(60), p.stderr.read()) for u, p in zip(uids, procs, strict=True)]
    admitted = {u for u, rc, _ in results if rc == 0}
    assert len(admitted) == 1, results
    (winner,) = admitted
    assert sum(rc == 0 for _, rc, _ in results) == uids.count(winner)
    for u, rc, err in results:
        if rc:
            assert f"in use by uid {winner}" in err and f"runs as uid {u}" in err, err
    clients = [
        subprocess.Popen(
            [str(CLIENT), "hold", str(MI)],
            stdout=subprocess.PIPE,
            text=True,
            env=node.env(CUDA_MPS_PIPE_DIRECTORY=str(daemon)),
            user=winner,
        )
        for _ in range(uids.count(winner))
    ]
    try:
        assert [c.stdout.readline().strip() for c in clients] == [f"ready {CUDA_SUCCESS}"] * len(clients)
    finally:
        for c in clients:
            c.kill()
            c.wait()
    for i, u in enumerate(uids):
        if u == winner:
            inits[i].kill()
            inits[i].wait()
    other = 1000 + (winner - 1000 + 1) % 4
    after = _hook(node, daemon, uid=other, state_dir=state_dir, pid=_init(inits), container_id="later")
    assert after.returncode == 0, after.stderr
