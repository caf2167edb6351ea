"""One node of a legacy (device plugin) cluster, in-process: API objects in memory, the extender, the device
plugin on real unix sockets, and the fake kubelet driving it. Shared by the legacy tests and benchmark."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from support.driverroot import LAYOUTS, build_driver_root, hook_dir
from support.fake_kubelet import FakeKubelet

from driver import names
from driver.gpu.model import Gpu
from driver.legacy.deviceplugin import DevicePluginConfig, LegacyDevicePlugin
from driver.legacy.extender.state import ExtenderState
from driver.legacy.extender.verbs import Extender
from driver.legacy.kubeapi import MemoryLegacyApi
from driver.legacy.records import GpuInfo, NodeGpus, node_gpus_annotation

NAMESPACE = "carve-system"
GIB = 1024**3


def make_gpu(i: int, memory_gib: int = 80, product: str = "NVIDIA A100-SXM4-80GB") -> Gpu:
    return Gpu(
        uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-{i:012d}",
        index=i,
        minor=i,
        product=product,
        memory_bytes=memory_gib * GIB,
        multiprocessors=108,
        architecture="ampere",
        cuda_compute_capability="8.0",
        driver_version="580.95.05",
        cuda_driver_version="13.0",
        pci_bus_id=f"0000:{0x10 + i:02x}:00.0",
    )


def inventory_node(
    name: str, gpus: int, memory_mib: int = 81920, split: int = 10, product: str = "NVIDIA A100"
) -> dict:
    """A Node object carrying the inventory annotation, as `carve device-plugin` would publish it."""
    inv = NodeGpus(
        gpus=tuple(
            GpuInfo(
                uuid=f"GPU-{name}-{i}",
                index=i,
                minor=i,
                product=product,
                memoryMiB=memory_mib,
                split=split,
                pciBusID=f"0000:{0x10 + i:02x}:00.0",
            )
            for i in range(gpus)
        )
    )
    return {"metadata": {"name": name, "annotations": node_gpus_annotation(inv)}}


def gpu_pod(
    name: str, containers: list[tuple[str, dict]], annotations: dict | None = None, ns: str = "team"
) -> dict:
    """A pod; each container is (name, limits); a name starting with 'init-' makes an init container."""
    spec: dict = {"containers": [], "initContainers": [], "schedulerName": names.LEGACY_SCHEDULER_NAME}
    for cname, limits in containers:
        key = "initContainers" if cname.startswith("init-") else "containers"
        spec[key].append({"name": cname, "resources": {"limits": {k: str(v) for k, v in limits.items()}}})
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


class LegacyNode:
    def __init__(
        self,
        node: str = "node-a",
        gpus: int = 2,
        split: int = 4,
        delivery: str = "cdi-field",
        api=None,
        extender_api=None,
    ) -> None:
        """`api` (the device plugin's, default in memory) needs MemoryLegacyApi's add_node and add_pod;
        `extender_api` defaults to the same one."""
        # Unix socket paths must stay under 108 bytes: a short temporary root, not pytest's long tmp_path.
        self.root = Path(tempfile.mkdtemp(prefix="cvl"))
        self.node = node
        self.api = api if api is not None else MemoryLegacyApi()
        self.api.add_node({"metadata": {"name": node}})
        self.gpus = [make_gpu(i) for i in range(gpus)]
        self.health = {g.uuid: True for g in self.gpus}
        # A driver root as the DRA plugin's tests use (tests/support/driverroot.py), the same hooks.
        driver = self.root / "driver"
        build_driver_root(driver, LAYOUTS["rhel"], self.root / ".stubs")
        for i in range(gpus):
            (driver / "dev" / f"nvidia{i}").touch()
        self.limiter_dir = hook_dir(self.root / "limiter")
        (self.limiter_dir / names.LIMITER_LIBRARY).write_bytes(b"\0")
        self.cdi_dir = self.root / "cdi"
        self.dp_dir = self.root / "dp"
        self.config = DevicePluginConfig(
            node_name=node,
            record_namespace=NAMESPACE,
            device_plugin_dir=self.dp_dir,
            pod_resources_socket=self.root / "pr" / "kubelet.sock",
            state_dir=self.root / "state",
            cdi_dir=self.cdi_dir,
            driver_root=driver,
            limiter_dir=self.limiter_dir,
            split_count=split,
            delivery=delivery,
            health_interval_s=0.05,
            watch_interval_s=0.05,
            collect_interval_s=3600,
            probe=lambda uuid: self.health[uuid],
        )
        self.kubelet = FakeKubelet(self.dp_dir, self.config.pod_resources_socket, self.cdi_dir).start()
        self.extender = Extender(ExtenderState(extender_api or self.api, NAMESPACE))
        self.plugin: LegacyDevicePlugin | None = None

    def start_plugin(self) -> LegacyDevicePlugin:
        self.plugin = LegacyDevicePlugin(self.config, self.api, self.gpus)
        self.plugin.start()
        assert self.kubelet.wait_for(
            lambda k: len(k.healthy_ids()) == len(self.gpus) * self.config.split_count
        )
        self.extender.state.resync()
        return self.plugin

    def close(self) -> None:
        if self.plugin:
            self.plugin.stop()
        self.kubelet.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def schedule(self, pod: dict) -> dict:
        """Create the pod, filter this node, bind it; returns the bind result."""
        self.api.add_pod(pod)
        meta = pod["metadata"]
        got = self.extender.filter({"Pod": pod, "NodeNames": [self.node]})
        if got["NodeNames"] != [self.node]:
            return {"Error": f"filter: {got['FailedNodes']}"}
        return self.extender.bind(
            {
                "PodName": meta["name"],
                "PodNamespace": meta["namespace"],
                "PodUID": meta["uid"],
                "Node": self.node,
            }
        )

    def admit(self, pod: dict) -> None:
        meta = pod["metadata"]
        containers = []
        for key, init in (("initContainers", True), ("containers", False)):
            for c in pod["spec"].get(key) or []:
                count = int((c["resources"]["limits"]).get(names.LEGACY_GPU, "0"))
                if count:
                    containers.append((c["name"], count, init))
        self.kubelet.admit(meta["namespace"], meta["name"], containers, meta.get("uid", ""))
