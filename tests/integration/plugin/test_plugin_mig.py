"""MIG on the fake NVML through the plugin process: real modes, pending changes, ownership of instances."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from support.plugin_harness import FAKE_GPUS, NODE, REPO, result

from driver import names

FAKE_LIB = REPO / "native/build/fakes/libnvidia-ml.so.1"


def fake_env(node) -> dict:
    """The plugin's view of the fake GPUs: topology, seed and state file (<plugin-dir>/fake-gpus.state)."""
    node.plugin_dir.mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARVE_FAKE_")}
    env.update(
        CARVE_FAKE_GPUS=FAKE_GPUS.removeprefix("fake:"),
        CARVE_FAKE_SEED=NODE,
        CARVE_FAKE_STATE=str(node.plugin_dir / "fake-gpus.state"),
    )
    return env


def gpu_call(node, code: str):
    """Run `code` with `gpus` discovered on the node's fake GPUs; returns what it prints as JSON."""
    prelude = (
        "import json\nfrom driver.gpu import discover\nfrom driver.gpu.mig import *\n"
        f"gpus = discover({FAKE_GPUS!r}, {NODE!r})\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", prelude + code],
        env=fake_env(node),
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def gpu_state(node) -> list[dict]:
    return gpu_call(
        node,
        "print(json.dumps([{'mig': g.mig_enabled, 'pending': g.mig_pending, "
        "'instances': [(m.placement.start, m.uuid) for m in g.mig_instances]} for g in discover("
        f"{FAKE_GPUS!r}, {NODE!r})]))",
    )


def hold_memory(node) -> subprocess.Popen:
    """A process with memory on GPU 0: NVML keeps a MIG mode change pending while it lives."""
    code = (
        "import ctypes, os, time\n"
        f"lib = ctypes.CDLL({str(FAKE_LIB)!r})\n"
        "lib.fake_mem_reserve.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_uint64]\n"
        "assert lib.fake_mem_reserve(0, os.getpid(), 1 << 30) == 0\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], env=fake_env(node), stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "ready"
    return holder


def published(node) -> dict[str, str]:
    return {d["name"]: d["attributes"]["type"]["string"] for d in node.devices()}


def wait_for(check, timeout_s: float = 15.0):
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)
    return value


def test_a_gpu_left_in_mig_mode_is_switched_off_before_it_is_published_whole(node, plugin_factory):
    gpu_call(node, "print(json.dumps(set_mig_mode(gpus[0].uuid, True)))")
    plugin_factory("exclusive")
    assert published(node)["gpu-0"] == names.TYPE_GPU
    assert gpu_state(node)[0]["mig"] is False


def test_a_pending_mig_mode_change_is_reported_for_that_gpu_only(node, kubelet, plugin_factory):
    holder = hold_memory(node)
    try:
        plugin = plugin_factory(
            "0=mig,1=soft,exclusive",
            extra=(
                "--healthz-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
                "--publish-interval",
                "0.5",
            ),
        )
        devices = published(node)
        assert not [d for d in devices if d.startswith("gpu-0")]  # neither as MIG nor as a whole GPU
        assert devices["gpu-1"] == names.TYPE_VGPU and devices["gpu-2"] == names.TYPE_GPU
        assert re.search(r"event=mig.mode-pending gpu=gpu-0 .*reason=\"needs reset\"", plugin.log())
        port = plugin.wait_for_log(r"healthz=127\.0\.0\.1:(\d+)").group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
            gpus = json.load(r)["gpus"]
        assert [(g["index"], g["applied"], g["pending"]) for g in gpus] == [
            (0, None, "needs reset"),
            (1, "soft", ""),
            (2, "exclusive", ""),
        ]
        metrics_port = plugin.wait_for_log(r"metrics=(\d+)").group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert re.search(r'carve_plugin_gpu_mode_pending\{[^}]*index="0"[^}]*reason="needs_reset"', text)
        soft = node.put_claim(
            "s",
            [
                result(
                    "s", "gpu-1", share_id="0b0e0a0d-1111-4222-8333-444455556666", consumed={"memory": "1Gi"}
                )
            ],
        )
        assert kubelet.prepare([soft])[soft[2]]["error"] == ""  # the other GPUs keep serving
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    # Once the GPU is idle the next publish applies the change.
    wait_for(lambda: any(n.startswith("gpu-0-mig-") for n in published(node)))
    assert gpu_state(node)[0]["mig"] is True


def test_two_mig_claims_on_one_gpu_are_unprepared_separately(node, kubelet, plugin_factory):
    plugin_factory("0=mig,exclusive")
    first = node.put_claim("first", [result("m", "gpu-0-mig-1g10gb-6")])
    second = node.put_claim("second", [result("m", "gpu-0-mig-1g10gb-4")])
    assert {r["error"] for r in kubelet.prepare([first, second]).values()} == {""}
    starts = sorted(s for s, _ in gpu_state(node)[0]["instances"])
    assert starts == [4, 6]
    assert kubelet.unprepare([first]) == {first[2]: ""}
    assert [s for s, _ in gpu_state(node)[0]["instances"]] == [4]
    assert kubelet.unprepare([second]) == {second[2]: ""}
    assert gpu_state(node)[0]["instances"] == []


def test_an_instance_carve_did_not_create_is_never_used_nor_destroyed(node, kubelet, plugin_factory):
    plugin = plugin_factory("0=mig,exclusive")
    foreign = gpu_call(node, "print(json.dumps(create_mig_instance(gpus[0].uuid, '1g.10gb', 6).uuid))")
    claim = node.put_claim("c", [result("m", "gpu-0-mig-1g10gb-6")])
    error = kubelet.prepare([claim])[claim[2]]["error"]
    assert "carve did not create" in error and foreign in error
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    plugin.stop()
    plugin_factory("0=mig,exclusive")  # recovery leaves it alone too
    assert gpu_state(node)[0]["instances"] == [[6, foreign]]


def test_the_whole_gpu_of_a_mig_gpu_runs_with_mig_mode_off(node, kubelet, plugin_factory):
    plugin_factory("0=mig,exclusive", extra=("--publish-interval", "0.5"))
    whole = node.put_claim("whole", [result("g", "gpu-0")])
    assert kubelet.prepare([whole])[whole[2]]["error"] == ""
    assert gpu_state(node)[0]["mig"] is False
    # Published as it really is: no MIG device of gpu-0 while MIG mode is off for the claim.
    wait_for(lambda: not [n for n in published(node) if n.startswith("gpu-0")])
    assert kubelet.unprepare([whole]) == {whole[2]: ""}
    wait_for(lambda: "gpu-0-mig-1g10gb-6" in published(node))
    assert gpu_state(node)[0]["mig"] is True


def test_a_crash_after_mig_mode_went_off_for_a_whole_gpu_claim_is_rolled_back(node, kubelet, plugin_factory):
    crashing = plugin_factory("0=mig,exclusive", env={"CARVE_FAULT": "prepare-after-mig"})
    whole = node.put_claim("whole", [result("g", "gpu-0")])
    with pytest.raises(grpc.RpcError):
        kubelet.prepare([whole])
    assert crashing.wait_exit() == -9
    assert gpu_state(node)[0]["mig"] is False  # switched off for the claim, then the crash
    plugin_factory("0=mig,exclusive")
    assert gpu_state(node)[0]["mig"] is True  # the claim was rolled back: the idle GPU is MIG again
    assert "gpu-0-mig-1g10gb-6" in published(node) and node.checkpoint_claims() == {}
    assert kubelet.prepare([whole])[whole[2]]["error"] == ""  # the kubelet's retry
    assert kubelet.unprepare([whole]) == {whole[2]: ""}
