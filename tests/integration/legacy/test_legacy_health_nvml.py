"""GPU health through the real NVML path: the device plugin runs in its own process on the fake
libnvidia-ml.so.1, a GPU is lost (CARVE_FAKE_LOST_FILE) and recovers, and the fake kubelet sees the
ListAndWatch list change each time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.legacy_node import LegacyNode

REPO = Path(__file__).resolve().parents[3]
PLUGIN = """
import json, sys
from pathlib import Path
from driver.gpu import discover
from driver.legacy.deviceplugin import DevicePluginConfig, LegacyDevicePlugin
from driver.legacy.kubeapi import MemoryLegacyApi
c = json.loads(sys.argv[1])
gpus = discover("fake:2xA100-80GB", "node-a")
config = DevicePluginConfig(
    node_name="node-a", record_namespace="carve-system", device_plugin_dir=Path(c["dp"]),
    pod_resources_socket=Path(c["pr"]), state_dir=Path(c["state"]), cdi_dir=Path(c["cdi"]),
    driver_root=Path(c["driver"]), limiter_dir=Path(c["limiter"]), split_count=2,
    health_interval_s=0.1, watch_interval_s=0.1,
)
plugin = LegacyDevicePlugin(config, MemoryLegacyApi(), gpus)
plugin.start()
print(json.dumps([g.uuid for g in gpus]), flush=True)
sys.stdin.read()
plugin.stop()
"""


def test_lost_gpu_turns_its_devices_unhealthy_and_back(fake_gpu_env, tmp_path):
    if not (REPO / "native/build/fakes/libnvidia-ml.so.1").exists():
        pytest.fail("native/build/fakes/libnvidia-ml.so.1 is missing: run `make native` first")
    node = LegacyNode(gpus=2, split=2)
    lost = tmp_path / "lost"
    env = fake_gpu_env("2xA100-80GB") | {"CARVE_FAKE_LOST_FILE": str(lost), "PYTHONPATH": str(REPO)}
    c = node.config
    args = {
        "dp": str(c.device_plugin_dir),
        "pr": str(c.pod_resources_socket),
        "state": str(c.state_dir),
        "cdi": str(c.cdi_dir),
        "driver": str(c.driver_root),
        "limiter": str(c.limiter_dir),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", PLUGIN, json.dumps(args)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        uuids = json.loads(proc.stdout.readline())
        k = node.kubelet
        assert k.wait_for(lambda k: k.registrations == 1 and len(k.healthy_ids()) == 4)
        lost.write_text("1\n")
        assert k.wait_for(lambda k: len(k.healthy_ids()) == 2)
        assert all(i.startswith(uuids[0]) for i in k.healthy_ids())
        lost.write_text("")
        assert k.wait_for(lambda k: len(k.healthy_ids()) == 4)
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)
        node.close()
