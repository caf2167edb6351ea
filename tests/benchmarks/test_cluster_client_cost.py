"""Benchmark: the client CPU of the two API calls every prepare makes (issue 30, fifth pass). Printed, never
asserted on time.

The claim read and the claim status write through KubeCluster (the client's REST layer, the loaders'
refresh hook paced) against the same calls through the client's generated methods with the hook run at
every request, which is what KubeCluster did before: the baseline, in the same run, alternating. Each
figure is the calling thread's CPU time (`time.thread_time()`), so the HTTP stand-in serving in this
process's other threads is not counted.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from support.apiserver_standin import ApiServerStandIn

from driver.cluster.kube import KubeCluster, PacedRefresh, load_api_client

READS = 300
REPEATS = 4
CLAIM = {
    "metadata": {"name": "c1", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "s"}]}},
    "status": {
        "allocation": {
            "devices": {
                "results": [{"request": "s", "driver": "gpu.carve.dev", "pool": "n", "device": "gpu-1"}]
            }
        }
    },
}
DEVICES = [{"driver": "gpu.carve.dev", "pool": "n", "device": "gpu-1", "data": {"memory": "1Gi"}}]


class GeneratedMethods:
    """The baseline: the generated methods, the loader's hook unpaced (KubeCluster before this pass)."""

    def __init__(self, kubeconfig: Path):
        api = load_api_client(kubeconfig)
        hook = api.configuration.refresh_api_key_hook
        assert isinstance(hook, PacedRefresh)
        api.configuration.refresh_api_key_hook = hook.hook
        self.cluster = KubeCluster(api)

    def read(self) -> dict:
        got = self.cluster.resource.read_namespaced_resource_claim("c1", "default", _preload_content=False)
        return json.loads(got.data)

    def write(self, obj: dict) -> None:
        self.cluster.resource.replace_namespaced_resource_claim_status(
            "c1", "default", obj, _preload_content=False
        )


class Rest:
    def __init__(self, kubeconfig: Path):
        self.cluster = KubeCluster(load_api_client(kubeconfig))

    def read(self) -> dict:
        return self.cluster.get_resource_claim("default", "c1")

    def write(self, obj: dict) -> None:
        self.cluster.update_resource_claim_status(obj)


def cpu_ms(fn, n: int) -> float:
    for _ in range(20):
        fn()
    started = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - started) / n * 1e3


def test_claim_read_and_status_write_client_cpu(tmp_path: Path) -> None:
    with ApiServerStandIn() as server:
        server.put_claim(CLAIM)
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        paths = {
            "generated methods (before)": GeneratedMethods(kubeconfig),
            "REST layer, paced hook": Rest(kubeconfig),
        }
        figures: dict[tuple[str, str], list[float]] = {}
        for rep in range(REPEATS):
            for name in list(paths) if rep % 2 == 0 else list(reversed(paths)):
                path = paths[name]

                def read_write(path=path) -> None:
                    obj = path.read()
                    obj["status"]["devices"] = DEVICES
                    path.write(obj)

                figures.setdefault((name, "read"), []).append(cpu_ms(path.read, READS))
                figures.setdefault((name, "read + status write"), []).append(cpu_ms(read_write, READS // 2))
    print(f"\n[bench] client CPU per call (median of {REPEATS} alternated runs; HTTP stand-in, real client)")
    for (name, call), values in figures.items():
        print(f"[bench]   {name:28s} {call:20s} {statistics.median(values):.3f} ms")
    for call in ("read", "read + status write"):
        before = statistics.median(figures[("generated methods (before)", call)])
        after = statistics.median(figures[("REST layer, paced hook", call)])
        print(f"[bench]   {call}: {after / before:.2f}x the generated methods' CPU")
