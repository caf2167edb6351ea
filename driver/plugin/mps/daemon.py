"""One MPS control daemon per GPU under the `mps` strategy, run by the plugin from the driver root.

Why in the plugin and not a pod per GPU: the daemon must exist before a client's cuInit and its pipe
directory must be a host directory the plugin can hand to containers (CDI mount); the plugin already runs
privileged on the node with the driver root mounted, knows which GPUs are `mps` (it publishes them) and
reports health. A pod per GPU would add a scheduling dependency (the claim's pod may start first) and a
second owner of the pipe directory. The cost: the daemons are the plugin's children, so a plugin restart
restarts them (clients of a stopped daemon fail their next CUDA call; docs/enforcement.md).

Layout: <plugin-dir>/mps/<gpu name>/pipe (CUDA_MPS_PIPE_DIRECTORY; mounted into clients) and .../log
(CUDA_MPS_LOG_DIRECTORY). The daemon sees only its GPU (CUDA_VISIBLE_DEVICES=<uuid>). `ensure` starts what
is missing and restarts a daemon that died (its pid file names a process that is gone, or its control
socket does not answer); `stop` sends `quit`.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
PID_FILE = "nvidia-cuda-mps-control.pid"
COMMAND_TIMEOUT_S = 10.0


@dataclass
class DaemonState:
    gpu_uuid: str
    name: str  # gpu-<minor>
    pipe: Path
    logs: Path
    restarts: int = 0
    healthy: bool = False
    error: str = ""


@dataclass
class MpsDaemons:
    control: Path | None  # nvidia-cuda-mps-control as the plugin sees it; None: not installed
    base: Path  # <plugin-dir>/mps
    env: dict[str, str] = field(default_factory=dict)  # extra environment (fake GPUs: CARVE_FAKE_*)
    daemons: dict[str, DaemonState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pipe_dir(self, gpu_uuid: str) -> Path | None:
        """The pipe directory of a healthy daemon of `gpu_uuid`, else None."""
        with self._lock:
            d = self.daemons.get(gpu_uuid)
            return d.pipe if d and d.healthy else None

    def ensure(self, gpus: Iterable[tuple[str, str]]) -> None:
        """Run a daemon for each (uuid, name) and none for other GPUs."""
        wanted = dict(gpus)
        with self._lock:
            for uuid in sorted(set(self.daemons) - set(wanted)):
                self._quit(self.daemons.pop(uuid))
            for uuid, name in sorted(wanted.items()):
                d = self.daemons.get(uuid)
                if d is None:
                    d = self.daemons[uuid] = DaemonState(
                        uuid, name, self.base / name / "pipe", self.base / name / "log"
                    )
                if not self._alive(d):
                    if d.healthy:
                        d.restarts += 1
                        event(
                            log, logging.WARNING, "mps.daemon-died", gpu=d.name, uuid=uuid, action="restart"
                        )
                    self._start(d)

    def stop(self) -> None:
        with self._lock:
            for uuid in sorted(self.daemons):
                self._quit(self.daemons.pop(uuid))

    def health(self) -> dict[str, dict]:
        with self._lock:
            return {
                d.name: {"uuid": d.gpu_uuid, "healthy": d.healthy, "restarts": d.restarts, "error": d.error}
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

    def command(self, gpu_uuid: str, line: str) -> str:
        """One control command (`get_server_list`, ...) to the daemon of `gpu_uuid`; its reply."""
        d = self.daemons[gpu_uuid]
        return self._run(d, [], line).stdout

    def _run(self, d: DaemonState, args: list[str], stdin: str = "") -> subprocess.CompletedProcess:
        assert self.control is not None
        return subprocess.run(
            [str(self.control), *args],
            input=stdin,
            env=self._env(d),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )

    def _alive(self, d: DaemonState) -> bool:
        try:
            pid = int((d.pipe / PID_FILE).read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return False
        try:
            return self._run(d, [], "get_server_list\n").returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _start(self, d: DaemonState) -> None:
        if self.control is None:
            d.healthy, d.error = False, "nvidia-cuda-mps-control not found in the driver root"
            event(log, logging.ERROR, "mps.unavailable", gpu=d.name, error=d.error)
            return
        # The pipe directory is reached by the clients of every uid in the containers; the log stays private.
        d.pipe.mkdir(parents=True, exist_ok=True)
        d.pipe.chmod(0o755)
        d.logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        for stale in (d.pipe / PID_FILE, d.pipe / "control"):
            stale.unlink(missing_ok=True)
        try:
            proc = self._run(d, ["-d"])
        except (OSError, subprocess.TimeoutExpired) as e:
            proc = subprocess.CompletedProcess([], 1, "", str(e))
        d.healthy = proc.returncode == 0 and self._alive(d)
        d.error = "" if d.healthy else (proc.stderr.strip() or f"exit status {proc.returncode}")
        event(
            log,
            logging.INFO if d.healthy else logging.ERROR,
            "mps.daemon-started" if d.healthy else "mps.daemon-failed",
            gpu=d.name,
            uuid=d.gpu_uuid,
            pipe=str(d.pipe),
            error=d.error or None,
        )

    def _quit(self, d: DaemonState) -> None:
        if self.control is not None and self._alive(d):
            try:
                self._run(d, [], "quit\n")
            except (OSError, subprocess.TimeoutExpired) as e:
                event(log, logging.WARNING, "mps.quit-failed", gpu=d.name, error=str(e))
        shutil.rmtree(d.pipe, ignore_errors=True)
        event(log, logging.INFO, "mps.daemon-stopped", gpu=d.name, uuid=d.gpu_uuid)


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
