"""The container's view, on real containers (containerd + runc, the default runtime of the local cluster):
what containerd made of carve's CDI specs inside a running container. A soft-slice (gates off: slot)
container has the CARVE_* env, the limiter mounted and preloaded, and a CUDA program loading the fake
libcuda.so.1 through the spec's mounts is refused an allocation over its quota and granted one under it;
whole-GPU and MIG containers see their device nodes. Observed with `kubectl exec`.

On a cluster started with the fake CRI on purpose (CARVE_E2E_RUNTIME=fakecri, for machines where containerd
cannot run) nothing runs in a container: these tests are skipped there, naming the runtime. A cluster asked
for containerd that cannot start it fails the session (e2e/conftest.py), never skips."""

from __future__ import annotations

import pytest

from driver import names
from e2e import kube

N1 = "e2e-n1"  # the MIG GPU (0) and the soft GPUs (1, 2)
QUOTA = 2 * 1024**3  # the soft claim's memory request, 2Gi
MiB = 1024**2
CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.fixture(autouse=True)
def real_containers(cluster):
    if cluster.runtime != "containerd":
        pytest.skip(f"needs real containers; this cluster runs the {cluster.runtime} runtime on purpose")


def _pod(name: str, template: str, image: str, env: dict[str, str] | None = None) -> dict:
    pod = kube.pod(name, claim_template=template, node=N1)
    container = pod["spec"]["containers"][0]
    container["image"] = image
    container["env"] = [{"name": k, "value": v} for k, v in (env or {}).items()]
    return pod


def _run(cluster, api, namespace: str, name: str, requests: list[dict], image: str, env=None) -> None:
    kube.create(api, namespace, kube.template(name, requests))
    kube.create(api, namespace, _pod(name, name, image, env))
    kube.wait_running(api, namespace, name, timeout_s=120)


def test_soft_slice_container_is_limited(cluster, api, namespace, gates_on):
    # The fake libcuda in the container must describe the node's GPUs as the plugin's NVML did (same
    # models, same seed: the same UUIDs the limiter binds the claim's limits to).
    fake = {names.ENV_FAKE_GPUS: cluster.nodes[N1].spec.gpus.removeprefix("fake:"), names.ENV_FAKE_SEED: N1}
    _run(cluster, api, namespace, "soft", kube.soft_or_slot(gates_on), "e2e/glibc", fake)
    env = kube.container_env(cluster, namespace, "soft")
    limit = int(env[f"{names.ENV_MEMORY_LIMIT}_0"])
    if gates_on:
        assert limit == QUOTA, env
    assert env[names.ENV_REGION].startswith("/var/run/carve/"), env
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void", env
    # The limiter is mounted where /etc/ld.so.preload names it, and the region file is there.
    preload = kube.exec_sh(cluster, namespace, "soft", "cat /etc/ld.so.preload").split()
    assert preload == [names.LIMITER_CONTAINER_PATH], preload
    kube.exec_sh(
        cluster,
        namespace,
        "soft",
        f"test -s {names.LIMITER_CONTAINER_PATH} && test -f {env[names.ENV_REGION]}",
    )

    def probe(nbytes: int) -> dict:
        return kube.cuda_probe(cluster, namespace, "soft", nbytes)

    over = probe(limit + 64 * MiB)
    assert over["library"] == "/usr/lib64/libcuda.so.1", over  # the fake driver's, mounted by the spec
    assert over["limiter"] is True, over  # preloaded into a process that never asked for it
    assert (over["init"], over["ctx"]) == (0, 0), over
    assert over["alloc"] == CUDA_ERROR_OUT_OF_MEMORY, f"over the quota of {limit} B: {over}"
    under = probe(limit // 2)
    assert under["alloc"] == 0, f"under the quota of {limit} B: {under}"


def _device_nodes(cluster, namespace: str, pod: str) -> set[str]:
    return set(kube.exec_sh(cluster, namespace, pod, "ls /dev /dev/nvidia-caps 2>/dev/null || true").split())


def test_whole_gpu_container_sees_its_device_node(cluster, api, namespace):
    _run(
        cluster,
        api,
        namespace,
        "whole",
        [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU}}],
        "e2e/busybox",
    )
    device = kube.results(kube.claim_of(api, namespace, "whole"))[0]["device"]
    seen = _device_nodes(cluster, namespace, "whole")
    gpus = {n for n in seen if n.startswith("nvidia") and n[len("nvidia") :].isdigit()}
    assert len(gpus) == 1, (device, sorted(seen))
    assert {"nvidiactl", "nvidia-uvm"} <= seen, sorted(seen)
    # A character device with the driver's major, as on the node.
    stat = kube.exec_sh(cluster, namespace, "whole", f"stat -c '%F %t' /dev/{gpus.pop()}").strip()
    assert stat == "character special file c3", stat  # 195 = 0xc3


def test_mig_container_sees_its_parent_gpu(cluster, api, namespace, gates_on):
    if not gates_on:
        pytest.skip("MIG devices need DRAPartitionableDevices, off in this run (GATES=off)")
    mig = kube.mig_profile("1g.10gb")
    _run(cluster, api, namespace, "mig", mig, "e2e/busybox")
    seen = _device_nodes(cluster, namespace, "mig")
    # The MIG GPU is n1's GPU 0: its node, and no other GPU's.
    gpus = {n for n in seen if n.startswith("nvidia") and n[len("nvidia") :].isdigit()}
    assert gpus == {"nvidia0"}, sorted(seen)
    env = kube.exec_sh(cluster, namespace, "mig", "env")
    assert "NVIDIA_VISIBLE_DEVICES=void" in env.split(), env
