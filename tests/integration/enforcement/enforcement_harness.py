"""Harness for the memory-enforcement backends: fake GPUs with a driver of the 615 generation, a stand-in
cgroup v2 filesystem, carve-cdi-hook memory-limits, the CUDA test client and the fake MPS daemon.

The fakes key a driver partition by the inode of a cgroup directory (native/fakes/common/cgroup.c): the
test builds `<tmp>/cgroupfs/<the test's own cgroup path>`, so every process it starts is "in" that cgroup
when it runs with CARVE_FAKE_CGROUP_FS=<tmp>/cgroupfs (a stand-in for the cgroup2 mount), and outside any
partition with another root that has the directory. With a root that lacks it, a process finds its
partition by its path (CARVE_FAKE_CGROUP), as a container on a hybrid host does.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "native" / "build"
FAKES = BUILD / "fakes"
FAKE_NVML = FAKES / "libnvidia-ml.so.1"
HOOK = BUILD / "carve-cdi-hook"
CLIENT = BUILD / "tests" / "limiter_client_cuda_nvml"
LIMITER = BUILD / "libcarve-limiter.so"
MPS_CONTROL = FAKES / "nvidia-cuda-mps-control"
MI = 1024**2
GI = 1024**3
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
NVML_SUPPORTED = "615.20.01"  # the first driver generation with cgroup memory limits (fake's rule)


def own_cgroup() -> str:
    """This process's cgroup v2 path ("0::" line), as its children inherit it."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    pytest.skip("no cgroup v2 line in /proc/self/cgroup (a cgroup v1-only host)")


@dataclass
class Node:
    tmp: Path
    gpus: str = "1xT4"
    driver: str = NVML_SUPPORTED

    def __post_init__(self) -> None:
        missing = [p for p in (FAKE_NVML, HOOK, CLIENT, LIMITER, MPS_CONTROL) if not p.exists()]
        if missing:
            pytest.fail(f"native build missing ({', '.join(map(str, missing))}): run `make native`")
        self.cgroup_fs = self.tmp / "cgroupfs"
        self.cgroup = Path(str(self.cgroup_fs) + own_cgroup().rstrip("/"))
        self.cgroup.mkdir(parents=True, exist_ok=True)
        self.record = self.tmp / "record"
        self.record.mkdir(exist_ok=True)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CARVE_", "CUDA_", "LD_PRELOAD"))}
        env.update(
            CARVE_FAKE_GPUS=self.gpus,
            CARVE_FAKE_SEED="enforcement-test",
            CARVE_FAKE_STATE=str(self.tmp / "fake.state"),
            CARVE_FAKE_DRIVER_VERSION=self.driver,
            CARVE_FAKE_CGROUP_FS=str(self.cgroup_fs),
            LD_LIBRARY_PATH=str(FAKES),
        )
        env.update(extra)
        return env

    def nvml(self, code: str, **extra: str) -> dict:
        """A pynvml snippet against the fake NVML; it sets `result`, printed as JSON."""
        prelude = (
            "import ctypes, json\n"
            f"ctypes.CDLL({str(FAKE_NVML)!r}, mode=ctypes.RTLD_GLOBAL)\n"
            "import pynvml as N\nN.nvmlInit()\nH = N.nvmlDeviceGetHandleByIndex(0)\n"
            "def err(fn, *a):\n"
            "    try:\n        fn(*a)\n        return 'ok'\n"
            "    except N.NVMLError as e:\n        return type(e).__name__\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", prelude + code + "\nprint(json.dumps(result))"],
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def uuid(self, index: int = 0) -> str:
        return self.nvml(f"result = N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByIndex({index}))")

    def hook(
        self,
        *limits: str,
        pid: int | None,
        clear: bool = False,
        container_id: str = "c1",
        proc_root: Path | None = None,
        **extra: str,
    ) -> subprocess.CompletedProcess:
        """carve-cdi-hook memory-limits as the runtime runs it: the OCI state on stdin."""
        state = {"ociVersion": "1.2.0", "id": container_id, "status": "created", "bundle": str(self.tmp)}
        if pid is not None:
            state["pid"] = pid
        args = [str(HOOK), "memory-limits", "--nvml", str(FAKE_NVML), "--record", str(self.record)]
        args += ["--cgroup-root", str(self.cgroup_fs)]
        args += ["--clear"] if clear else []
        args += ["--proc-root", str(proc_root)] if proc_root else []
        for limit in limits:
            args += ["--limit", limit]
        return subprocess.run(
            args, input=json.dumps(state), env=self.env(**extra), capture_output=True, text=True, timeout=60
        )

    @contextlib.contextmanager
    def container(self) -> Iterator[subprocess.Popen]:
        """A process standing for the container's init: the hook reads its /proc/<pid>/cgroup."""
        proc = subprocess.Popen(["sleep", "600"])
        try:
            yield proc
        finally:
            proc.kill()
            proc.wait()

    def client(self, *args: str, preload: bool = False, **extra: str) -> str:
        """The CUDA test client; preload=False: the limiter is not loaded at all."""
        env = self.env(**extra)
        if preload:
            env["LD_PRELOAD"] = str(LIMITER)
        proc = subprocess.run([str(CLIENT), *args], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"client {args}: {proc.stdout}\n{proc.stderr}"
        return proc.stdout.strip().splitlines()[-1]

    def mps(self, *commands: str, pipe: Path, **extra: str) -> str:
        """Commands to the fake MPS control daemon, as `echo ... | nvidia-cuda-mps-control`."""
        proc = subprocess.run(
            [str(MPS_CONTROL)],
            input="".join(f"{c}\n" for c in commands),
            env=self.env(
                CUDA_MPS_PIPE_DIRECTORY=str(pipe),
                CUDA_MPS_LOG_DIRECTORY=str(pipe.parent / "mps-log"),
                **extra,
            ),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


@contextlib.contextmanager
def held_client(node: Node, pipe: Path, user: int | None = None, **env: str) -> Iterator[subprocess.Popen]:
    """The CUDA test client holding 1 MiB as an MPS client of the daemon at `pipe` (as `user` when given)."""
    proc = subprocess.Popen(
        [str(CLIENT), "hold", str(MI)],
        stdout=subprocess.PIPE,
        text=True,
        env=node.env(CUDA_MPS_PIPE_DIRECTORY=str(pipe), **env),
        user=user,
    )
    try:
        assert proc.stdout.readline().strip() == f"ready {CUDA_SUCCESS}"
        yield proc
    finally:
        proc.kill()
        proc.wait()
