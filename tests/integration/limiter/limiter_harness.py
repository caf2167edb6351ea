"""Harness for the limiter's integration tests: fake GPUs, a claim region, and the C test client.

Every process runs with libcarve-limiter.so preloaded against the fake libcuda.so.1 / libnvidia-ml.so.1
(native/fakes), exactly as a container runs it against the real driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from driver.limits import (
    ClaimLimits,
    ClaimRuntime,
    DeviceLimit,
    Region,
    create_region,
    limits_path_for,
    write_limits,
)

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "native" / "build"
LIMITER = BUILD / "libcarve-limiter.so"
FAKES = BUILD / "fakes"
CLIENT = BUILD / "tests" / "limiter_client_cuda_nvml"
PATHS = BUILD / "tests" / "limiter_paths_cuda_nvml"  # every entry point called all three ways
# The start of a ctypes client script: the driver loaded, initialised, device 0's primary context current.
CUDA_CONTEXT = """import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
ctx, dev = ctypes.c_void_p(), ctypes.c_int()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
"""
# CUDA_CONTEXT and what a client script needs to read its own heap: heap() is the bytes malloc has handed
# out and not taken back (mallinfo2: from the heap, and in blocks of their own), so a test can tell the
# limiter's table from its spill list by what the process holds.
HEAP_CLIENT = (
    CUDA_CONTEXT
    + """libc = ctypes.CDLL("libc.so.6")
class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Mallinfo2
def heap():
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd
"""
)
# CUDA_CONTEXT and what a client script needs to launch graphs of kernels and read what the limiter charged:
# graph_exec(grids, empty_first) instantiates a graph of one kernel node per (x, y, z) grid (after an empty
# node if asked), and settled_blocks() waits for the feedback thread to fold the launches into device 0's
# count (carveLimiterLaunchedBlocks, moved at its ticks) and returns it.
GRAPH_CLIENT = (
    CUDA_CONTEXT
    + f"""import time
limiter = ctypes.CDLL({str(LIMITER)!r})
limiter.carveLimiterLaunchedBlocks.restype = ctypes.c_uint64
cuda.carveFakeKernel.restype = ctypes.c_void_p

class KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h)
    _fields_ = (
        [("func", ctypes.c_void_p)]
        + [(f"{{a}}Dim{{x}}", ctypes.c_uint) for a in ("grid", "block") for x in "XYZ"]
        + [("sharedMemBytes", ctypes.c_uint)]
        + [(name, ctypes.c_void_p) for name in ("kernelParams", "extra", "kern", "ctx")]
    )

def graph_exec(grids, empty_first=False):
    f = cuda.carveFakeKernel(ctypes.c_uint64(1000))
    graph, node, exec_ = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuGraphCreate(ctypes.byref(graph), 0) == 0
    if empty_first:
        assert cuda.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, ctypes.c_size_t(0)) == 0
    no_deps = ctypes.c_size_t(0)
    for x, y, z in grids:
        p = KernelNodeParams(f, x, y, z, 32, 1, 1)  # the function, its grid, blocks of 32 threads
        assert cuda.cuGraphAddKernelNode_v2(ctypes.byref(node), graph, None, no_deps, ctypes.byref(p)) == 0
    assert cuda.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, ctypes.c_ulonglong(0)) == 0
    return exec_

def settled_blocks():
    assert cuda.cuCtxSynchronize() == 0
    last, still = -1, 0
    while still < 20:
        now = limiter.carveLimiterLaunchedBlocks(0)
        still = still + 1 if now == last else 0
        last = now
        time.sleep(0.01)
    return last
"""
)


# CUDA_CONTEXT and an application that resolves cuMemAlloc as the CUDA runtime does (cuGetProcAddress_v2 at
# CUDA 12.0) and allocates 64 MiB through the address it was given; its last line is
# {"resolve": <cuGetProcAddress_v2's result>, "over": <the allocation's>}. For the tests of the limiter's hook
# hand-out under the refusing driver's cuGetProcAddress variants.
PROCADDR_ALLOC_CLIENT = (
    CUDA_CONTEXT
    + """import json
pfn, status, flags = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint64(0)
rc = cuda.cuGetProcAddress_v2(b"cuMemAlloc", ctypes.byref(pfn), 12000, flags, ctypes.byref(status))
alloc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)(pfn.value)
p = ctypes.c_uint64()
print(json.dumps({"resolve": rc, "over": alloc(ctypes.byref(p), ctypes.c_size_t(64 << 20))}))
"""
)


def without_nvml(tmp_path: Path) -> str:
    """A library directory for LD_LIBRARY_PATH: the fake libcuda, and a libnvidia-ml.so.1 that loads but has
    no nvmlInit_v2 (it is the fake libcuda too): NVML cannot start, whatever the host has installed."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.1").symlink_to(FAKES / "libcuda.so.1")
    (lib / "libnvidia-ml.so.1").symlink_to(FAKES / "libcuda.so.1")
    return str(lib)


def require_native() -> None:
    needed = (LIMITER, FAKES / "libcuda.so.1", FAKES / "libnvidia-ml.so.1", CLIENT, PATHS)
    missing = [p for p in needed if not p.exists()]
    if missing:
        pytest.fail(f"native build missing ({', '.join(map(str, missing))}): run `make native`")


def write_claim(region: Path, limits: ClaimLimits, **runtime) -> None:
    """A claim's files as the plugin writes them: the writable region and the limits file next to it."""
    create_region(region, limits)
    write_limits(limits_path_for(region), limits, ClaimRuntime(**runtime))


@dataclass
class Claim:
    """One claim on fake GPUs: its region file and the environment of its processes."""

    tmp: Path
    gpus: str = "1xT4"
    state: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def region(self) -> Path:
        return self.tmp / "region"

    @property
    def limits(self) -> Path:
        """The plugin's limits file, where the limiter looks for it: <region dir>/limits/limits."""
        return self.tmp / "limits" / "limits"

    def create(self, memory: int = 0, cores: int = 0, uuid: str = "", **kw: str) -> Claim:
        """The claim's region and its limits file, as the plugin writes them at prepare."""
        self.claim_limits = ClaimLimits(
            devices=(DeviceLimit(memory, cores, uuid=uuid),), region_path=str(self.region), **kw
        )
        write_claim(self.region, self.claim_limits)
        return self

    def rewrite_limits(self, **runtime) -> None:
        """What the plugin does while the claim runs: effective shares, high-priority neighbours."""
        write_limits(self.limits, self.claim_limits, ClaimRuntime(**runtime))

    def env(self, preload: bool = True, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CARVE_", "CUDA_", "LD_PRELOAD"))}
        env.update(
            CARVE_FAKE_GPUS=self.gpus,
            CARVE_FAKE_SEED="limiter-test",
            CARVE_FAKE_STATE=str(self.state or self.tmp / "fake.state"),
            CARVE_REGION=str(self.region),
            # each claim sees only its own region unless a test gives a shared root (several claims)
            CARVE_REGION_DIR=str(self.tmp / "no-regions-root"),
            CARVE_LOG="warn",
            LD_LIBRARY_PATH=str(FAKES),
        )
        if preload:
            env["LD_PRELOAD"] = str(LIMITER)
        env.update(self.extra)
        env.update(extra)
        return env

    def run(
        self, *args: str, timeout: float = 60, check: bool = True, program: Path = CLIENT, **env: str
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(program), *args], env=self.env(**env), capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"client {args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def popen(self, *args: str, **env: str) -> subprocess.Popen:
        return subprocess.Popen([str(CLIENT), *args], env=self.env(**env), stdout=subprocess.PIPE, text=True)

    def json(self, *args: str, **env: str) -> dict:
        return json.loads(self.run(*args, **env).stdout.strip().splitlines()[-1])

    def popen_sampled(self, samples: Path, rows: list[str], *args: str, **env: str) -> subprocess.Popen:
        """The client, with the fake NVML's per-process utilization a fixed list (CARVE_FAKE_UTIL_FILE):
        `rows` are `<gpu> <pid> <smUtil>` lines, `{pid}` the client's own pid. The list must name that pid
        before the limiter's first tick, so a shell writes it with its own pid ($$) and execs the client,
        which keeps the pid; the limiter is preloaded into the client, not into the shell."""
        text = "\n".join(rows).replace("{pid}", "$$")
        script = f'cat > "$SAMPLES" <<EOF\n{text}\nEOF\nexec env LD_PRELOAD="$PRELOAD" "$CLIENT" "$@"'
        environment = self.env(
            preload=False,
            CARVE_FAKE_UTIL_FILE=str(samples),
            SAMPLES=str(samples),
            PRELOAD=str(LIMITER),
            CLIENT=str(CLIENT),
            **env,
        )
        return subprocess.Popen(
            ["sh", "-c", script, "sh", *args], env=environment, stdout=subprocess.PIPE, text=True
        )

    def region_values_while(self, client: subprocess.Popen, read: Callable[[Region], int]) -> set[int]:
        """Every value `read` found in the claim's region, polled until the client ended (its output read)."""
        seen: set[int] = set()
        try:
            while client.poll() is None:
                with Region.open(self.region) as r:
                    seen.add(read(r))
                time.sleep(0.02)
        finally:
            client.communicate(timeout=60)
        return seen


class Relimit:
    """The client's `relimit BYTES`: one allocation per rewrite, the process kept between them."""

    def __init__(self, c, nbytes: int):
        env = c.env(CARVE_TICK_MS="10")
        self.proc = subprocess.Popen(
            [str(CLIENT), "relimit", str(nbytes)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.first = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, f"client ended ({self.proc.wait()}): {self.proc.stderr.read()}"
        return json.loads(line)

    def after_rewrite(self, step: str = "go") -> dict:
        self.proc.stdin.write(f"{step}\n")
        self.proc.stdin.flush()
        return self._read()

    def __enter__(self) -> Relimit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()  # a no-op once close() saw it end
        self.proc.wait()

    def close(self) -> tuple[int, str]:
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=60)
        return rc, self.proc.stderr.read()


def python_client(script: str, env: dict[str, str]) -> subprocess.Popen:
    """`script` run by this Python under `env`, each stream a text pipe: a client a test talks to."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
