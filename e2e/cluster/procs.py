"""Child processes of the launcher: started with their output in a log file, stopped by pid (SIGTERM, then
SIGKILL), never by name. Every process is its own process group so a stop reaches what it started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StartError(RuntimeError):
    """A component did not come up; the message names it and ends with the tail of its log."""


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    env: dict[str, str] | None = None  # what start() added to the environment (a restart passes it again)

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen else -1

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)

    def kill(self) -> None:
        """SIGKILL: a crash, for recovery tests."""
        if self.alive():
            assert self.popen is not None
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)


@dataclass
class Supervisor:
    """Starts processes and stops all of them, newest first."""

    logs: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> Proc:
        log = self.logs / f"{name}.log"
        proc = Proc(name, [str(a) for a in argv], log, env=dict(env) if env else None)
        # Each process starts in an empty directory of its own: on the fake CRI the kubelet removes container
        # log paths relative to its working directory, which must never be the repository.
        cwd = self.logs / "cwd" / name
        cwd.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(proc.argv)}\n".encode())
            out.flush()
            proc.popen = subprocess.Popen(
                proc.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def wait(self, proc: Proc, what: str, check: Callable[[], bool], timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not proc.alive():
                raise StartError(
                    f"{proc.name} exited ({proc.popen.returncode}) before {what}:\n{tail(proc.log)}"
                )
            with contextlib.suppress(Exception):
                if check():
                    return
            time.sleep(0.5)
        raise StartError(f"{proc.name}: no {what} after {timeout_s:.0f}s:\n{tail(proc.log)}")

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()
