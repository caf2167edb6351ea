"""One MPS control daemon per GPU under the `mps` strategy, run by the plugin from the driver root.

Why in the plugin and not a pod per GPU: the daemon must exist before a client's cuInit and its pipe
directory must be a host directory the plugin can hand to containers (CDI mount); the plugin already runs
privileged on the node with the driver root mounted, knows which GPUs are `mps` (it publishes them) and
reports health. A pod per GPU would add a scheduling dependency (the claim's pod may start first) and a
second owner of the pipe directory. The cost: the daemons are the plugin's children, so a plugin restart
restarts them (clients of a stopped daemon fail their next CUDA call; docs/enforcement.md).

Layout (docs/security.md, "MPS"): <plugin-dir>/mps/<gpu name>/ (0700) holds pipe/ (CUDA_MPS_PIPE_DIRECTORY,
the only part containers see, read-only), log/ (CUDA_MPS_LOG_DIRECTORY), `daemon` (the pid and start time
of the daemon the plugin runs: the mps-user hook's peer check, and how a restarted plugin stops the daemon
of the one that crashed) and the hook's uid lease (users, users.lock).

The plugin owns each daemon by pid: `nvidia-cuda-mps-control -f` is its child, and it is dead only when
waitpid says so. Nothing in the pipe directory is read to decide anything (a tenant must not decide when a
root daemon starts). Before another daemon starts, the old one is stopped and reaped. Restarts back off.
`pipe_dir` (what prepare asks) never waits on daemon I/O: `_lock` guards the state only; `_ops` serialises
the slow work (starting, checking, stopping).
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from driver.fsutil import PER_BOOT, ensure_private_dir, write_atomic
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
COMMAND_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 300.0
STABLE_S = 600.0  # a daemon that ran this long resets the back-off
MISSES_BEFORE_RESTART = 3
RECORD_FILE = "daemon"  # "<pid> <start time>": the plugin's word on which process is the GPU's daemon
PIPE_DIR = "pipe"
LOG_DIR = "log"


def start_time(pid: int, proc: Path = Path("/proc")) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): with the pid, names one process for good."""
    try:
        text = (proc / str(pid) / "stat").read_bytes()[:4096].decode(errors="replace")
        return int(text[text.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class DaemonState:
    gpu_uuid: str
    name: str  # gpu-<minor>
    root: Path  # <plugin-dir>/mps/<name> (0700)
    proc: subprocess.Popen | None = None
    restarts: int = 0
    healthy: bool = False
    error: str = ""
    started_at: float = 0.0  # monotonic
    next_start: float = 0.0  # monotonic: no start before this (back-off)
    backoff_s: float = 0.0
    misses: int = 0  # checks in a row the running daemon did not answer

    @property
    def pipe(self) -> Path:
        return self.root / PIPE_DIR

    @property
    def logs(self) -> Path:
        return self.root / LOG_DIR

    @property
    def record(self) -> Path:
        return self.root / RECORD_FILE


@dataclass
class MpsDaemons:
    control: Path | None  # nvidia-cuda-mps-control as the plugin sees it; None: not installed
    base: Path  # <plugin-dir>/mps
    env: dict[str, str] = field(default_factory=dict)  # extra environment (fake GPUs: CARVE_FAKE_*)
    daemons: dict[str, DaemonState] = field(default_factory=dict)
    proc_root: Path = Path("/proc")
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the state only: never held across I/O
    _ops: threading.Lock = field(default_factory=threading.Lock)  # starting, checking, stopping daemons

    def pipe_dir(self, gpu_uuid: str) -> Path | None:
        """The pipe directory of a healthy daemon of `gpu_uuid`, else None. Never waits on a daemon."""
        with self._lock:
            d = self.daemons.get(gpu_uuid)
            return d.pipe if d and d.healthy else None

    def state_dir(self, gpu_uuid: str) -> Path | None:
        """<plugin-dir>/mps/<gpu>: the daemon record and the uid lease of the mps-user hook."""
        with self._lock:
            d = self.daemons.get(gpu_uuid)
            return d.root if d else None

    def ensure(self, gpus: Iterable[tuple[str, str]]) -> None:
        """Run a daemon for each (uuid, name) and none for other GPUs; restart one whose process exited."""
        wanted = dict(gpus)
        with self._ops:
            with self._lock:
                gone = [self.daemons.pop(u) for u in sorted(set(self.daemons) - set(wanted))]
                for uuid, name in sorted(wanted.items()):
                    if uuid not in self.daemons:
                        self.daemons[uuid] = DaemonState(uuid, name, self.base / name)
                todo = [self.daemons[u] for u in sorted(wanted)]
            for d in gone:
                self._stop(d)
                shutil.rmtree(d.root, ignore_errors=True)
                event(log, logging.INFO, "mps.daemon-stopped", gpu=d.name, uuid=d.gpu_uuid)
            for d in todo:
                if d.proc is not None and d.proc.poll() is None:
                    self._check(d)
                    continue
                if d.proc is not None:
                    self._died(d)
                if time.monotonic() >= d.next_start:
                    self._start(d)

    def stop(self) -> None:
        with self._ops:
            with self._lock:
                gone = [self.daemons.pop(u) for u in sorted(self.daemons)]
            for d in gone:
                self._stop(d)
                event(log, logging.INFO, "mps.daemon-stopped", gpu=d.name, uuid=d.gpu_uuid)

    def health(self) -> dict[str, dict]:
        with self._lock:
            return {
                d.name: {
                    "uuid": d.gpu_uuid,
                    "healthy": d.healthy,
                    "restarts": d.restarts,
                    "error": d.error,
                    "pid": d.proc.pid if d.proc is not None and d.healthy else None,
                }
                for d in self.daemons.values()
            }

    # --- the daemon process ----------------------------------------------------------------------------

    def _env(self, d: DaemonState) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_")}
        env.update(self.env)
        env.update(
            CUDA_VISIBLE_DEVICES=d.gpu_uuid,
            CUDA_MPS_PIPE_DIRECTORY=str(d.pipe),
            CUDA_MPS_LOG_DIRECTORY=str(d.logs),
        )
        return env

    def _run(self, d: DaemonState, stdin: str) -> subprocess.CompletedProcess:
        """One control command; only its exit status is used, so its reply (which passes through the pipe
        directory tenants see) is never read into the plugin: nothing to bound."""
        assert self.control is not None
        return subprocess.run(
            [str(self.control)],
            input=stdin,
            env=self._env(d),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )

    def _answers(self, d: DaemonState) -> bool:
        try:
            return self._run(d, "get_server_list\n").returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _check(self, d: DaemonState) -> None:
        """A running daemon that stops answering for MISSES_BEFORE_RESTART passes in a row is stopped (and
        started again after the back-off): one that hangs would hold every client's cuInit."""
        if self._answers(d):
            d.misses = 0
            with self._lock:
                d.healthy, d.error = True, ""
            return
        d.misses += 1
        if d.misses < MISSES_BEFORE_RESTART:
            return
        event(log, logging.WARNING, "mps.daemon-hung", gpu=d.name, uuid=d.gpu_uuid, misses=d.misses)
        with self._lock:
            d.error = f"did not answer {d.misses} checks in a row"
        self._stop(d)
        d.misses = 0
        d.restarts += 1
        d.backoff_s = min(max(d.backoff_s * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
        d.next_start = time.monotonic() + d.backoff_s

    def _died(self, d: DaemonState) -> None:
        """Our child exited (waitpid said so): reap it, count it, and back off before the next start."""
        assert d.proc is not None
        code = d.proc.returncode
        d.proc = None
        d.record.unlink(missing_ok=True)
        ran = time.monotonic() - d.started_at
        stable = ran >= STABLE_S or not d.backoff_s
        d.backoff_s = BACKOFF_MIN_S if stable else min(d.backoff_s * 2, BACKOFF_MAX_S)
        d.next_start = time.monotonic() + d.backoff_s
        with self._lock:
            was, d.healthy, d.error = d.healthy, False, f"exited with status {code}"
        if was:
            d.restarts += 1
        event(
            log,
            logging.WARNING,
            "mps.daemon-died",
            gpu=d.name,
            uuid=d.gpu_uuid,
            status=code,
            action=f"restart in {d.backoff_s:g}s",
        )

    def _start(self, d: DaemonState) -> None:
        if self.control is None:
            with self._lock:
                d.healthy, d.error = False, "nvidia-cuda-mps-control not found in the driver root"
            event(log, logging.ERROR, "mps.unavailable", gpu=d.name, error=d.error)
            d.next_start = float("inf")
            return
        ensure_private_dir(self.base)
        ensure_private_dir(d.root)
        self._stop_orphan(d)
        # The pipe directory is reached (read-only) by the clients of every uid; only the daemon writes in it.
        # It is ours alone now (no daemon runs in it): anything left there is the dead daemon's.
        d.pipe.mkdir(mode=0o755, exist_ok=True)
        os.chmod(d.pipe, 0o755, follow_symlinks=False)
        _empty(d.pipe)
        d.logs.mkdir(mode=0o700, exist_ok=True)
        try:
            d.proc = subprocess.Popen(
                [str(self.control), "-f"],
                env=self._env(d),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            d.proc = None
            with self._lock:
                d.healthy, d.error = False, f"cannot run {self.control}: {e.strerror}"
            d.backoff_s = min(max(d.backoff_s * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
            d.next_start = time.monotonic() + d.backoff_s
            event(log, logging.ERROR, "mps.daemon-failed", gpu=d.name, uuid=d.gpu_uuid, error=d.error)
            return
        d.started_at = time.monotonic()
        started = start_time(d.proc.pid, self.proc_root)
        write_atomic(d.record, f"{d.proc.pid} {started or 0}\n".encode(), mode=0o600, durable=PER_BOOT)
        ready = False
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and d.proc.poll() is None:
            if (d.pipe / "control").is_socket() and self._answers(d):
                ready = True
                break
            time.sleep(0.05)
        with self._lock:
            d.healthy = ready
            d.error = "" if ready else "the control daemon did not answer in time"
        event(
            log,
            logging.INFO if ready else logging.ERROR,
            "mps.daemon-started" if ready else "mps.daemon-failed",
            gpu=d.name,
            uuid=d.gpu_uuid,
            pid=d.proc.pid,
            pipe=str(d.pipe),
            error=d.error or None,
        )
        if not ready:
            self._stop(d)  # never two: a daemon that did not come up goes before the next try
            d.backoff_s = min(max(d.backoff_s * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
            d.next_start = time.monotonic() + d.backoff_s

    def _stop(self, d: DaemonState) -> None:
        """Stop our daemon of `d` and reap it: `quit`, then SIGTERM, then SIGKILL."""
        proc, d.proc = d.proc, None
        with self._lock:
            d.healthy = False
        if proc is None:
            return
        if proc.poll() is None and self.control is not None:
            try:
                self._run(d, "quit\n")
            except (OSError, subprocess.TimeoutExpired) as e:
                event(log, logging.WARNING, "mps.quit-failed", gpu=d.name, error=str(e))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                proc.wait(STOP_TIMEOUT_S)
                break
            except subprocess.TimeoutExpired:
                proc.send_signal(sig)
        proc.wait()
        d.record.unlink(missing_ok=True)

    def _stop_orphan(self, d: DaemonState) -> None:
        """A daemon a crashed plugin left running (our own record names it, pid and start time): stop it
        through a pidfd (a reused pid is never signalled) before ours starts."""
        try:
            pid_s, start_s = d.record.read_text()[:64].split()
            pid, started = int(pid_s), int(start_s)
        except (OSError, ValueError):
            return
        d.record.unlink(missing_ok=True)
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            if start_time(pid, self.proc_root) != started:
                return
            signal.pidfd_send_signal(fd, signal.SIGTERM)
            if not select.select([fd], [], [], STOP_TIMEOUT_S)[0]:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                select.select([fd], [], [], STOP_TIMEOUT_S)
            event(log, logging.WARNING, "mps.orphan-stopped", gpu=d.name, pid=pid)
        except OSError:
            pass
        finally:
            os.close(fd)


def _empty(directory: Path) -> None:
    """Remove what a dead daemon left in its pipe directory, by name relative to the directory's descriptor,
    never following a link (only the daemon writes there; this is belt and braces)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in os.listdir(fd):
            try:
                os.unlink(name, dir_fd=fd)
            except IsADirectoryError:
                shutil.rmtree(name, dir_fd=fd, ignore_errors=True)
            except OSError:
                pass
    finally:
        os.close(fd)


def watch(
    daemons: MpsDaemons,
    gpus: Callable[[], Iterable[tuple[str, str]]],
    stop: threading.Event,
    interval_s: float = 5.0,
) -> threading.Thread:
    """A thread keeping `daemons` in line with `gpus()` every `interval_s` (restarts dead daemons)."""

    def loop() -> None:
        while not stop.wait(interval_s):
            try:
                daemons.ensure(gpus())
            except Exception as e:  # the watcher must outlive one bad pass
                event(log, logging.ERROR, "mps.watch-failed", exc_info=True, error=f"{type(e).__name__}: {e}")

    t = threading.Thread(target=loop, name="mps-daemons", daemon=True)
    t.start()
    return t
