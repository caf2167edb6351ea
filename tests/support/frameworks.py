"""Real CUDA clients (the cudart program, CuPy, PyTorch) run as a tenant of a soft slice.

Shared by tests/frameworks (on the fake GPUs), tests/gpu (on hardware) and the limiter benchmark. Each client
runs in its own process with the framework environment's python (`make test-frameworks`,
hack/frameworks_env.py, named by CARVE_FRAMEWORKS_PYTHON), with or without the limiter preloaded, and with the
claim's files as the plugin writes them: the region and the limits file beside it (driver.limits). A crash, a
hang (the timeout) or a client that prints no JSON is an AssertionError carrying the client's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from driver.limits import ClaimLimits, ClaimRuntime, DeviceLimit, create_region, limits_path_for, write_limits

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "native" / "build"
LIMITER = BUILD / "libcarve-limiter.so"
FAKES = BUILD / "fakes"
CUDART_CLIENT = BUILD / "tests" / "cudart_client"
CLIENTS = REPO / "tests" / "frameworks" / "clients"
ENV_VAR = "CARVE_FRAMEWORKS_PYTHON"
GIB = 1 << 30
QUOTA = 4 * GIB  # the slice of the framework tests: 4 GiB of a fake T4
T4_MEMORY = 15360 << 20  # the fake T4 (native/fakes/common/models.c)
T4_SMS = 40


class FrameworksMissing(Exception):
    """The framework environment is not there; the message says how to get it."""


def frameworks_python() -> Path:
    value = os.environ.get(ENV_VAR, "")
    if not value or not Path(value).exists():
        raise FrameworksMissing(
            f"{ENV_VAR}={value!r}: no framework environment; run `make test-frameworks` (it builds the cached"
            f" venv of tests/frameworks/requirements.txt with hack/frameworks_env.py and sets {ENV_VAR})"
        )
    return Path(value)


def cudart(major: int) -> Path:
    """libcudart.so.<major> of the framework env: 12 from nvidia-cuda-runtime-cu12, 13 from torch's."""
    venv = frameworks_python().parent.parent
    found = sorted(venv.glob(f"lib/python3*/site-packages/nvidia/*/lib/libcudart.so.{major}"))
    if not found:
        raise FrameworksMissing(f"no libcudart.so.{major} under {venv}/lib/python3*/site-packages/nvidia")
    return found[0]


@dataclass
class Tenant:
    """One claim's process on a GPU: fake (CARVE_FAKE_GPUS) or real, limited or not."""

    tmp: Path
    gpus: str = "1xT4"  # fake GPUs; "" on real hardware
    memory: int = 0
    cores: int = 0
    core_policy: str = "force"
    limiter: bool = True
    state: Path | None = None  # the fake GPUs' state file: tenants sharing a GPU share it
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        if self.gpus:
            self._create_fake_state()
        if self.limiter:
            limits = ClaimLimits(
                devices=(DeviceLimit(self.memory, self.cores),),
                region_path=str(self.region),
                core_policy=self.core_policy,
            )
            create_region(self.region, limits)
            write_limits(limits_path_for(self.region), limits, ClaimRuntime())

    def _create_fake_state(self) -> None:
        """Creates the fake GPUs' state file before any client runs. The fake libcuda.so.1 and
        libnvidia-ml.so.1 each initialise a new state file on their own, and the record lock that
        serialises that is per process, so inside one process (the client's CUDA start-up racing the
        limiter's NVML thread) the second library could truncate the file under the first: SIGBUS.
        A fake-only race (reported to native/fakes); an existing file is never truncated."""
        state = self.state or self.tmp / "fake.state"
        if state.exists():
            return
        init = "import ctypes, sys; sys.exit(ctypes.CDLL(sys.argv[1]).nvmlInit_v2())"
        env = {k: v for k, v in self.env().items() if k != "LD_PRELOAD"}
        subprocess.run(
            [sys.executable, "-c", init, str(FAKES / "libnvidia-ml.so.1")], env=env, check=True, timeout=60
        )

    @property
    def region(self) -> Path:
        return self.tmp / "region"

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CARVE_", "CUDA_", "LD_PRELOAD", "PYTORCH_"))
        }
        env.update(CUPY_CACHE_DIR=str(self.tmp.parent / "cupy-kernels"), PYTHONDONTWRITEBYTECODE="1")
        if self.gpus:
            env.update(
                CARVE_FAKE_GPUS=self.gpus,
                CARVE_FAKE_SEED="frameworks",
                CARVE_FAKE_STATE=str(self.state or self.tmp / "fake.state"),
                LD_LIBRARY_PATH=os.pathsep.join(
                    filter(None, [str(FAKES), os.environ.get("LD_LIBRARY_PATH")])
                ),
            )
        if self.limiter:
            env.update(
                LD_PRELOAD=str(LIMITER),
                CARVE_REGION=str(self.region),
                CARVE_REGION_DIR=str(self.tmp / "no-regions-root"),
                CARVE_LOG="warn",
            )
        env.update(self.extra)
        env.update(extra)
        return env

    def command(self, client: str, *args: str) -> list[str]:
        if client.startswith("cudart"):  # "cudart12", "cudart13"
            return [str(CUDART_CLIENT), str(cudart(int(client[6:]))), *args]
        return [str(frameworks_python()), str(CLIENTS / f"{client}_client.py"), *args]

    def run(self, client: str, *args: str, timeout: float = 180, **extra: str) -> dict:
        """The client's JSON answer; a failure of any kind raises with its output."""
        argv = self.command(client, *args)
        try:
            proc = subprocess.run(
                argv, env=self.env(**extra), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as e:
            raise AssertionError(
                f"{client} {' '.join(args)} hung: no exit within {timeout} s\n"
                f"stdout:\n{_text(e.stdout)[-4000:]}\nstderr:\n{_text(e.stderr)[-4000:]}"
            ) from None
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
            raise AssertionError(
                f"{client} {' '.join(args)} failed (exit {proc.returncode}):\n"
                f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
            )
        return json.loads(lines[-1])

    def popen(self, client: str, *args: str, **extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(client, *args),
            env=self.env(**extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def answer(client: str, proc: subprocess.Popen, timeout: float = 180) -> dict:
    """The JSON answer of a client started with Tenant.popen, as Tenant.run judges it."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"{client} hung: no exit within {timeout} s\nstdout:\n{out[-4000:]}\nstderr:\n{err[-4000:]}"
        ) from None
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise AssertionError(
            f"{client} failed (exit {proc.returncode}):\nstdout:\n{out[-4000:]}\nstderr:\n{err[-4000:]}"
        )
    return json.loads(lines[-1])


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
