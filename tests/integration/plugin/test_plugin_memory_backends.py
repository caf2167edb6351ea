"""The plugin with each memory-enforcement backend and strategy: what it publishes, the CDI edits it writes,
and those edits run for real against the fake driver (the hook from the spec, a CUDA process without the
limiter, a client of the plugin's own MPS daemon)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from support.plugin_harness import result, slice_config

from driver import names

GI = 1024**3
MI = 1024**2
DRIVER_615 = {"CARVE_FAKE_DRIVER_VERSION": "615.20.01"}
REPO = Path(__file__).resolve().parents[3]
CLIENT = REPO / "native/build/tests/limiter_client_cuda_nvml"
FAKES = REPO / "native/build/fakes"
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2


def _cgroup_v2() -> bool:
    return any(line.startswith("0::") for line in Path("/proc/self/cgroup").read_text().splitlines())


needs_cgroup_v2 = pytest.mark.skipif(not _cgroup_v2(), reason="the host has no cgroup v2 hierarchy")


def spec_of(node, uid: str) -> dict:
    return json.loads((node.cdi_dir / names.cdi_spec_file_name(uid)).read_text())


def env_of(doc: dict) -> dict:
    out = {}
    for edits in [doc.get("containerEdits", {})] + [d["containerEdits"] for d in doc["devices"]]:
        for e in edits.get("env", []):
            k, _, v = e.partition("=")
            out[k] = v
    return out


def hooks_of(doc: dict, name: str) -> list[dict]:
    return [h for h in doc["containerEdits"].get("hooks", []) if h["hookName"] == name]


def attribute(node, device: str, key: str):
    for d in node.devices():
        if d["name"] == device:
            raw = d["attributes"].get(key)
            return next(iter(raw.values())) if raw else None
    raise LookupError(device)


def soft_claim(node, name: str, memory: str = "4Gi", device: str = "gpu-1", **config):
    return node.put_claim(
        name,
        [result("slice", device, share_id=str(uuid.uuid4()), consumed={"memory": memory, "cores": "30"})],
        [slice_config(**config)] if config else [],
    )


def run_hook(hook: dict, pid: int, container_id: str = "c1") -> subprocess.CompletedProcess:
    """Run a hook of the spec as runc would: its path, args and env, the OCI state on stdin."""
    env = dict(kv.split("=", 1) for kv in hook.get("env", []))
    state = {
        "ociVersion": "1.2.0",
        "id": container_id,
        "status": "created",
        "pid": pid,
        "bundle": "/nonexistent",
    }
    return subprocess.run(
        [hook["path"], *hook["args"][1:]], input=json.dumps(state), env=env, capture_output=True, text=True
    )


def client(node, *args: str, **env: str) -> str:
    full = {
        "CARVE_FAKE_GPUS": "2xA100-80GB,1xT4",
        "CARVE_FAKE_SEED": node.node_name,
        "CARVE_FAKE_STATE": str(node.plugin_dir / "fake-gpus.state"),
        "LD_LIBRARY_PATH": str(FAKES),
        **env,
    }
    proc = subprocess.run([str(CLIENT), *args], env=full, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_limiter_backend_by_default_on_an_older_driver(node, kubelet, plugin_factory):
    plugin_factory("1=soft,exclusive")
    assert attribute(node, "gpu-1", "memoryEnforcement") == "limiter"
    assert attribute(node, "gpu-0", "memoryEnforcement") is None  # whole GPUs carry none
    claim = soft_claim(node, "s")
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    doc = spec_of(node, claim[2])
    assert hooks_of(doc, "createRuntime") == [] and hooks_of(doc, "poststop") == []
    assert env_of(doc)["CARVE_MEMORY_LIMIT_0"] == str(4 * GI)


@needs_cgroup_v2
def test_auto_takes_the_driver_and_the_spec_carries_the_partition_hooks(node, kubelet, plugin_factory):
    plugin_factory("1=soft,exclusive", env=DRIVER_615)
    assert attribute(node, "gpu-1", "memoryEnforcement") == "driver"
    gpu_uuid = attribute(node, "gpu-1", "uuid")
    claim = soft_claim(node, "s")
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    doc = spec_of(node, claim[2])
    (create,) = hooks_of(doc, "createRuntime")
    (poststop,) = hooks_of(doc, "poststop")
    assert create["args"][:2] == [names.HOOK_BINARY, "memory-limits"]
    assert create["args"][-2:] == ["--limit", f"{gpu_uuid}:{4 * GI}:{4 * GI}"]
    assert "--clear" in poststop["args"] and "--clear" not in create["args"]
    # The limiter still loads (cores, reporting) and holds the same number as a second line.
    assert env_of(doc)["CARVE_MEMORY_LIMIT_0"] == str(4 * GI)
    assert Path(create["args"][create["args"].index("--record") + 1]).is_dir()


@needs_cgroup_v2
def test_the_specs_hook_puts_a_process_without_the_limiter_under_the_driver(node, kubelet, plugin_factory):
    plugin_factory("1=soft,exclusive", env=DRIVER_615)
    claim = soft_claim(node, "s", memory="2Gi")
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    (create,) = hooks_of(spec_of(node, claim[2]), "createRuntime")
    container = subprocess.Popen(["sleep", "600"])  # the container's init, in this test's cgroup
    try:
        proc = run_hook(create, container.pid)
        assert proc.returncode == 0, proc.stderr
    finally:
        container.kill()
        container.wait()
    visible = {"CUDA_VISIBLE_DEVICES": "1"}  # gpu-1, as the claim's container sees it
    # No LD_PRELOAD: the limiter is not there; the (fake) driver refuses past the hard limit.
    assert int(client(node, "alloc", str(2 * GI), **visible)) == CUDA_SUCCESS
    assert int(client(node, "alloc", str(2 * GI + MI), **visible)) == CUDA_ERROR_OUT_OF_MEMORY
    # poststop clears it
    (poststop,) = hooks_of(spec_of(node, claim[2]), "poststop")
    assert run_hook(poststop, 0).returncode == 0
    assert int(client(node, "alloc", str(2 * GI + MI), **visible)) == CUDA_SUCCESS


def test_driver_mode_refuses_to_start_where_the_driver_cannot(node, plugin_factory):
    with pytest.raises(RuntimeError, match=r"--memory-enforcement driver: gpu-0 .*NOT_SUPPORTED"):
        plugin_factory("1=soft,exclusive", extra=("--memory-enforcement", "driver"))


@needs_cgroup_v2
def test_limiter_mode_keeps_the_driver_out(node, kubelet, plugin_factory):
    plugin_factory("1=soft,exclusive", env=DRIVER_615, extra=("--memory-enforcement", "limiter"))
    assert attribute(node, "gpu-1", "memoryEnforcement") == "limiter"


def test_memory_limit_above_the_request_needs_mps_under_the_driver(node, kubelet, plugin_factory):
    plugin_factory("1=soft,exclusive")
    claim = soft_claim(node, "burst", memory="4Gi", memoryLimit="6Gi")
    error = kubelet.prepare([claim])[claim[2]]["error"]
    assert "config.memoryLimit: 6Gi is above the request" in error and "mps device" in error
    equal = soft_claim(node, "equal", memory="4Gi", memoryLimit="4Gi")
    assert kubelet.prepare([equal])[equal[2]]["error"] == ""
    below = soft_claim(node, "below", memory="4Gi", memoryLimit="2Gi")
    assert "below the memory the claim requests" in kubelet.prepare([below])[below[2]]["error"]


def test_mps_gpu_gets_a_daemon_and_its_claims_the_client_setup(node, kubelet, plugin_factory):
    plugin = plugin_factory("2=mps,exclusive")
    assert attribute(node, "gpu-2", "type") == "mps" and attribute(node, "gpu-2", "sharing") == "mps"
    pipe = node.plugin_dir / "mps" / "gpu-2" / "pipe"
    assert (pipe / "nvidia-cuda-mps-control.pid").exists()
    claim = soft_claim(node, "m", memory="2Gi", device="gpu-2")
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    doc = spec_of(node, claim[2])
    env = env_of(doc)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == names.MPS_CONTAINER_PIPE_DIR
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"
    assert "CARVE_CORES_LIMIT_0" not in env  # MPS partitions the SMs; the limiter does not throttle on top
    mounts = {m["containerPath"]: m for m in doc["containerEdits"]["mounts"]}
    assert mounts[names.MPS_CONTAINER_PIPE_DIR]["hostPath"] == str(pipe)
    # Read-only: a tenant reaches the daemon's socket but cannot create, delete or replace anything there.
    assert "ro" in mounts[names.MPS_CONTAINER_PIPE_DIR]["options"]
    assert names.MPS_CONTAINER_SHM_DIR not in mounts  # no --mps-shm-dir: the container keeps its own
    # MPS serves one uid per GPU: a createRuntime hook asks this GPU's daemon before the container starts.
    (check,) = [h for h in doc["containerEdits"]["hooks"] if "mps-user" in h["args"]]
    assert check["hookName"] == "createRuntime" and check["path"].endswith(names.HOOK_BINARY)
    args = check["args"]
    assert args[args.index("--pipe-dir") + 1] == str(pipe)
    assert args[args.index("--gpu") + 1] == attribute(node, "gpu-2", "uuid")
    assert Path(args[args.index("--control") + 1]).name == "nvidia-cuda-mps-control"
    # The uid lease and the daemon's record: the plugin's directory of the GPU, which no container sees.
    assert args[args.index("--state-dir") + 1] == str(pipe.parent)
    assert (pipe.parent.stat().st_mode & 0o777) == 0o700
    # A client with the claim's settings against the node's daemon: MPS holds its pinned memory.
    mps_env = {
        "CUDA_VISIBLE_DEVICES": "2",
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
    }
    assert int(client(node, "alloc", str(2 * GI), **mps_env)) == CUDA_SUCCESS
    assert int(client(node, "alloc", str(2 * GI + MI), **mps_env)) == CUDA_ERROR_OUT_OF_MEMORY
    plugin.stop()
    assert not (pipe / "control").exists()  # the plugin stops its daemons


def test_mps_clients_get_the_daemons_shm_dir_at_dev_shm(node, kubelet, plugin_factory, tmp_path):
    shm = tmp_path / "mps-shm"
    plugin_factory("2=mps,1=soft,exclusive", extra=("--mps-shm-dir", str(shm)))
    claim = soft_claim(node, "m", memory="2Gi", device="gpu-2")
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    mounts = {m["containerPath"]: m for m in spec_of(node, claim[2])["containerEdits"]["mounts"]}
    assert mounts[names.MPS_CONTAINER_SHM_DIR]["hostPath"] == str(shm)
    assert set(mounts[names.MPS_CONTAINER_SHM_DIR]["options"]) >= {"rw", "bind", "nosuid", "nodev"}
    # Only mps clients share the daemons' /dev/shm; a soft claim keeps its container's own.
    soft = soft_claim(node, "s", memory="2Gi", device="gpu-1")
    assert kubelet.prepare([soft])[soft[2]]["error"] == ""
    soft_mounts = [m["containerPath"] for m in spec_of(node, soft[2])["containerEdits"]["mounts"]]
    assert names.MPS_CONTAINER_SHM_DIR not in soft_mounts


def test_a_dead_mps_daemon_is_restarted(node, plugin_factory):
    """The plugin's own record names its daemon; a daemon that dies (waitpid) is replaced by one new daemon,
    and the record follows it."""
    import os
    import signal
    import time

    plugin = plugin_factory("2=mps,exclusive")
    record = node.plugin_dir / "mps" / "gpu-2" / "daemon"

    def recorded() -> int:
        try:
            return int(record.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    first = recorded()
    assert first and Path(f"/proc/{first}").exists()
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and recorded() in (0, first):
        time.sleep(0.2)
    now = recorded()
    assert now not in (0, first)
    plugin.wait_for_log(r"mps\.daemon-died")
    plugin.wait_for_log(r"mps\.daemon-started.*pid=" + str(now))


def test_a_claim_on_an_mps_gpu_without_a_control_daemon_fails_naming_the_gpu(
    node, kubelet, plugin_factory, tmp_path
):
    # The daemon binary is missing (neither the driver root nor the fake GPUs' directory has it): no daemon
    # runs, so a claim on the mps GPU must fail at prepare with a reason, not get a pipe directory no
    # daemon serves (the container would fail on a missing mount or hang in cuInit, no word on the claim).
    (node.driver_root / "usr/bin" / names.MPS_CONTROL_BINARY).unlink()
    libs = tmp_path / "fake-libs"  # the fake GPUs' libraries, without the fake nvidia-cuda-mps-control
    libs.mkdir()
    for lib in ("libnvidia-ml.so.1", "libcuda.so.1"):
        (libs / lib).symlink_to(FAKES / lib)
    plugin_factory("2=mps,exclusive", env={"CARVE_FAKE_LIB_DIR": str(libs)})
    gpu_uuid = attribute(node, "gpu-2", "uuid")
    claim = soft_claim(node, "m", memory="2Gi", device="gpu-2")
    error = kubelet.prepare([claim])[claim[2]]["error"]
    assert f"no MPS control daemon runs for GPU {gpu_uuid}" in error, error
    assert not (node.cdi_dir / names.cdi_spec_file_name(claim[2])).exists()  # nothing for the runtime to run
    # A claim of another GPU on the same node is not affected.
    other = soft_claim(node, "s", memory="2Gi", device="gpu-1")
    assert kubelet.prepare([other])[other[2]]["error"] == ""


@needs_cgroup_v2
def test_mps_under_the_driver_may_burst_within_the_class_ratio(node, kubelet, plugin_factory):
    plugin_factory("2=mps,exclusive", env=DRIVER_615)
    gpu_uuid = attribute(node, "gpu-2", "uuid")
    claim = soft_claim(node, "m", memory="2Gi", device="gpu-2", memoryLimit="3Gi")
    # No class policy: the default ratio is 1, no burst.
    assert "maxMemoryLimitRatio" in kubelet.prepare([claim])[claim[2]]["error"]
    allowed = node.put_claim(
        "m2",
        [result("slice", "gpu-2", share_id=str(uuid.uuid4()), consumed={"memory": "2Gi", "cores": "30"})],
        [
            {
                "source": "FromClass",
                "opaque": {
                    "driver": names.DRIVER_NAME,
                    "parameters": {
                        "apiVersion": names.CONFIG_API_VERSION,
                        "kind": "SliceConfig",
                        "claimPolicy": {"maxMemoryLimitRatio": 2},
                    },
                },
            },
            slice_config(memoryLimit="3Gi"),
        ],
    )
    assert kubelet.prepare([allowed])[allowed[2]]["error"] == ""
    create, user = hooks_of(spec_of(node, allowed[2]), "createRuntime")
    assert create["args"][1] == "memory-limits" and user["args"][1] == "mps-user"  # the limits, then the uid
    assert create["args"][-1] == f"{gpu_uuid}:{2 * GI}:{3 * GI}"
