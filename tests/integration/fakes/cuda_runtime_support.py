"""The real CUDA runtimes for the fake-libcuda tests: PyPI wheels and C programs built against them.

cudart 13 comes with the venv (`make native` installs nvidia-cuda-runtime 13.x for cuda.h). cudart 12 (a 3 MB
wheel) is installed on first use with pip into .venv/carve-test-wheels/, so CI pays little and only when
these tests run. Device code comes from images/ (NVRTC output, committed), not from a compiler.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fakes_support import FAKE_DIR, NATIVE, REPO

HERE = Path(__file__).resolve().parent
WHEELS = REPO / ".venv" / "carve-test-wheels"
SHIM = HERE / "cudart_shim"  # crt/host_defines.h: the wheels ship cuda_runtime_api.h without crt/
PROBE_SRC = HERE / "cudart_probe.c"
BUILD = NATIVE / "build" / "tests" / "cudart"

CUDART12 = "nvidia-cuda-runtime-cu12==12.9.79"


@dataclass(frozen=True)
class Runtime:
    """One cudart wheel: where its headers and libcudart.so.N are."""

    major: int
    include: Path
    lib: Path

    @property
    def soname(self) -> str:
        return f"libcudart.so.{self.major}"


def pip_target(*requirements: str) -> Path:
    """Installs the requirements into .venv/carve-test-wheels/<first requirement> once; returns the dir."""
    target = WHEELS / requirements[0].split("==")[0]
    stamp = target / ".installed"
    if stamp.exists() and stamp.read_text() == "\n".join(requirements):
        return target
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         "--target", str(target), "--upgrade", *requirements],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise AssertionError(f"pip could not install {requirements} (these tests need PyPI):\n{proc.stderr}")
    stamp.write_text("\n".join(requirements))
    return target


def runtime12() -> Runtime:
    root = pip_target(CUDART12) / "nvidia" / "cuda_runtime"
    return Runtime(12, root / "include", root / "lib")


def runtime13() -> Runtime:
    """The venv's nvidia-cuda-runtime 13.x (cuda.h for the fakes' build comes from it too)."""
    import nvidia  # the namespace package of the nvidia-* wheels

    for d in nvidia.__path__:
        for lib in sorted(glob.glob(os.path.join(d, "*", "lib", "libcudart.so.13"))):
            root = Path(lib).parent.parent
            return Runtime(13, root / "include", root / "lib")
    raise AssertionError("no libcudart.so.13 in the venv: `make native` installs nvidia-cuda-runtime 13")


def build_probe(rt: Runtime) -> Path:
    """cudart_probe.c compiled against the runtime's header and linked to its libcudart.so.N."""
    out = BUILD / f"cudart_probe{rt.major}"
    if out.exists() and out.stat().st_mtime >= PROBE_SRC.stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["gcc", "-std=c11", "-O1", "-Wall", "-Werror", "-o", str(out), str(PROBE_SRC), f"-I{SHIM}",
         f"-I{rt.include}", f"-L{rt.lib}", f"-l:{rt.soname}", f"-Wl,-rpath,{rt.lib}"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise AssertionError(f"building the cudart probe failed:\n{proc.stderr}")
    return out


def fake_env(gpus: str, state: Path | None = None, **extra: str) -> dict[str, str]:
    """An environment whose libcuda.so.1 and libnvidia-ml.so.1 are the fakes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARVE_", "CUDA_", "LD_PRELOAD"))}
    env.update(CARVE_FAKE_GPUS=gpus, CARVE_FAKE_SEED="cudart-test", LD_LIBRARY_PATH=str(FAKE_DIR))
    if state is not None:
        env["CARVE_FAKE_STATE"] = str(state)
    env.update(extra)
    return env


def run_probe(probe: Path, steps: list[str], env: dict[str, str]) -> dict[str, str]:
    """Runs the probe's steps; returns its "key value" lines. Fails with the probe's output otherwise."""
    proc = subprocess.run([str(probe), *steps], env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 or not proc.stdout.rstrip().endswith("done"):
        raise AssertionError(
            f"{probe.name} {steps} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    lines = [line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line]
    return {k: v for k, v in lines}
