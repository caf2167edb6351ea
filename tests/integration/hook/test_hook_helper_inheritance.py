"""What a root hook passes to the helper it runs (issue 30): `carve-cdi-hook mps-user` runs the MPS
control binary as root on the host. The runtime starts the hook with whatever descriptors and environment
it was given; the helper must get neither: no descriptor beyond 0-2 (a leaked one could be a file of the
runtime's, or the container's), and an environment of the hook's making (CUDA_MPS_PIPE_DIRECTORY from
--pipe-dir, a fixed PATH), so LD_PRELOAD, LD_LIBRARY_PATH or a forged CUDA_MPS_PIPE_DIRECTORY in the hook's
own environment reach nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HOOK = REPO / "native/build/carve-cdi-hook"


def _free_fd(start: int = 100) -> int:
    """A descriptor number nothing in this process holds: dup2 onto one in use would close another thread's
    file (a stand-in server's socket) under it."""
    for n in range(start, start + 1000):
        try:
            os.fstat(n)
        except OSError:
            return n
    raise RuntimeError("no free descriptor number")


HOSTILE_ENV = {
    "LD_PRELOAD": "/tenant/evil.so",
    "LD_LIBRARY_PATH": "/tenant/lib",
    "CUDA_MPS_PIPE_DIRECTORY": "/tenant/pipe",
    "BASH_ENV": "/tenant/rc",
    "ENV": "/tenant/rc",
    "PATH": "/tenant/bin:/usr/bin:/bin",
}


def test_the_mps_control_helper_inherits_no_descriptor_and_no_environment(tmp_path):
    if not HOOK.exists():
        pytest.fail(f"{HOOK} missing: run `make native`")
    seen = tmp_path / "seen"
    control = tmp_path / "control"
    # The helper reports what it got: its environment, then every descriptor it holds, from a program it
    # becomes (`exec`: the shell keeps no saved copy of stdout, and its script descriptor is close-on-exec,
    # so what `ls` lists beyond 0-2 is what the hook passed, plus the one `ls` opens on /proc/self/fd).
    control.write_text(
        f"#!/bin/sh\nenv > {seen}.env\ncat >/dev/null\nexec ls -l /proc/self/fd > {seen}.fds\n"
    )
    control.chmod(0o755)
    secret = tmp_path / "secret"
    secret.write_text("runtime's file")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(
        json.dumps({"ociVersion": "1.2.0", "process": {"user": {"uid": 1000}}})
    )
    state = {
        "ociVersion": "1.2.0",
        "id": "c1",
        "status": "creating",
        "pid": os.getpid(),
        "bundle": str(bundle),
    }
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    fd = os.open(secret, os.O_RDONLY)
    leak_fd = _free_fd()
    os.dup2(fd, leak_fd, inheritable=True)
    try:
        done = subprocess.run(
            [str(HOOK), "mps-user", "--control", str(control), "--pipe-dir", str(pipe), "--gpu", "GPU-x"],
            input=json.dumps(state),
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **HOSTILE_ENV},
            pass_fds=(leak_fd,),
        )
    finally:
        os.close(leak_fd)
        os.close(fd)
    assert done.returncode == 0, done.stderr
    # `ls -l` lines: "... <fd> -> <target>"
    fds = {}
    for line in (tmp_path / "seen.fds").read_text().splitlines():
        if " -> " in line:
            head, target = line.split(" -> ", 1)
            fds[int(head.split()[-1])] = target
    assert leak_fd not in fds, f"the helper inherited descriptor {leak_fd}: {fds}"
    # beyond 0-2 only ls's own directory handle: not the runtime's file, not a /dev/null of the hook's
    extra = {n: t for n, t in fds.items() if n > 2 and not re.fullmatch(r"/proc/\d+/fd", t)}
    assert not extra, f"the helper holds descriptors beyond 0-2: {extra}"
    env = dict(line.split("=", 1) for line in (tmp_path / "seen.env").read_text().splitlines() if "=" in line)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
    assert "/tenant" not in env.get("PATH", "")
    assert not {"LD_PRELOAD", "LD_LIBRARY_PATH", "BASH_ENV", "ENV"} & set(env), env
