"""The legacy shim on real containers (containerd + runc), once per `--cdi-delivery` mode the kubelet and
containerd here support (docs/legacy.md, "Kubelets before 1.29"): `cdi-field` (the AllocateResponse's
cdi_devices, handed to containerd in the CRI request) and `cdi-annotation` (a `cdi.k8s.io/` container
annotation containerd resolves). For each, a pod asking HAMi's resources runs on a legacy node of its own
(`e2e-l2`, kubelet + containerd + `carve device-plugin`, the chart's carve-scheduler and extender), and
inside the container: the CARVE_* limits of its request, `/etc/ld.so.preload` naming the mounted limiter,
and a CUDA program loading the fake libcuda.so.1 through the spec's mounts is refused an allocation over its
quota and granted one under it (as e2e/test_containers.py checks for a DRA soft slice).

Skipped on a cluster started with the fake CRI on purpose (nothing runs in a container there).
"""

from __future__ import annotations

import pytest

from driver import names
from driver.legacy.allocate import CDI_ANNOTATION_PREFIX
from e2e import kube
from e2e.cluster.nodes import NodeSpec

pytestmark = pytest.mark.legacy

NODE = NodeSpec("e2e-l2", "fake:1xA100-80GB,1xT4", "legacy")
MIB = 1024**2
CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.fixture(scope="module")
def shim(cluster):
    if cluster.runtime != "containerd":
        pytest.skip(f"needs real containers; this cluster runs the {cluster.runtime} runtime on purpose")
    from e2e.cluster.legacy import LegacyShim

    s = LegacyShim(cluster, spec=NODE, runtime="containerd")
    try:
        s.start()
    except Exception as e:
        pytest.fail(
            f"e2e: the legacy shim on containerd did not start (logs in {cluster.root / 'logs'}): {e}"
        )
    yield s
    s.stop()


def _runtime_view(shim, namespace: str, pod: str) -> dict:
    """containerd's record of the pod's `main` container: the CDI devices and the annotations of the CRI
    request (a device plugin's annotations land there)."""
    assert shim.node.containerd
    found = [
        c
        for c in shim.node.containerd.created_containers()
        if (c["namespace"], c["pod"], c["name"]) == (namespace, pod, "main")
    ]
    assert len(found) == 1, f"{namespace}/{pod}: {len(found)} containers named main in containerd"
    return found[0]


@pytest.mark.parametrize("delivery", ["cdi-field", "cdi-annotation"])
def test_legacy_container_is_limited(shim, api, cluster, namespace, delivery):
    if (shim.delivery or "cdi-field") != delivery:
        shim.restart_device_plugin(delivery)
    mem, cores = 4096, 30
    pod = kube.legacy_pod("limited", 1, mem, cores)
    main = pod["spec"]["containers"][0]
    main["image"] = "e2e/glibc"
    # The fake libcuda in the container describes the node's GPUs as the plugin's NVML did (same models,
    # same seed: the same UUIDs the limiter binds the limits to).
    main["env"] = [
        {"name": names.ENV_FAKE_GPUS, "value": NODE.gpus.removeprefix("fake:")},
        {"name": names.ENV_FAKE_SEED, "value": NODE.name},
    ]
    kube.create(api, namespace, pod)
    running = kube.wait_running(api, namespace, "limited", timeout_s=120)
    assert running.spec.node_name == NODE.name

    # The edits reached containerd the way this mode delivers them, and only that way.
    view = _runtime_view(shim, namespace, "limited")
    # The plugin's annotation is `cdi.k8s.io/<vendor>_<key>`; a 1.29 kubelet also writes the CDI devices of
    # the response's field as an annotation of its own (`cdi.k8s.io/devicemanager_<pod>-<container>`, for
    # runtimes that read only annotations), naming the same device.
    cri = view["annotations"]
    plugins = {k: v for k, v in cri.items() if k.startswith(f"{CDI_ANNOTATION_PREFIX}{names.CDI_VENDOR}_")}
    if delivery == "cdi-field":
        assert len(view["cdiDevices"]) == 1 and not plugins, view
        kubelets = {v for k, v in cri.items() if k.startswith(CDI_ANNOTATION_PREFIX)}
        assert kubelets <= set(view["cdiDevices"]), cri
    else:
        assert not view["cdiDevices"], view
        assert len(plugins) == 1, cri
        (devices,) = plugins.values()
        assert devices.startswith(f"{names.CDI_KIND}=") and "," not in devices, devices

    env = kube.container_env(cluster, namespace, "limited")
    limit = int(env[f"{names.ENV_MEMORY_LIMIT}_0"])
    assert limit == mem * MIB, env
    assert env[f"{names.ENV_CORES_LIMIT}_0"] == str(cores), env
    assert f"{names.ENV_MEMORY_LIMIT}_1" not in env, env
    assert env[names.ENV_REGION].startswith("/var/run/carve/"), env
    # The limiter is mounted where /etc/ld.so.preload names it, and the region file is there.
    preload = kube.exec_sh(cluster, namespace, "limited", "cat /etc/ld.so.preload").split()
    assert preload == [names.LIMITER_CONTAINER_PATH], preload
    kube.exec_sh(
        cluster,
        namespace,
        "limited",
        f"test -s {names.LIMITER_CONTAINER_PATH} && test -f {env[names.ENV_REGION]}",
    )
    over = kube.cuda_probe(cluster, namespace, "limited", limit + 64 * MIB)
    assert over["library"] == "/usr/lib64/libcuda.so.1", over  # the fake driver's, mounted by the spec
    assert over["limiter"] is True, over  # preloaded into a process that never asked for it
    assert (over["init"], over["ctx"]) == (0, 0), over
    assert over["alloc"] == CUDA_ERROR_OUT_OF_MEMORY, f"{delivery}: over the quota of {limit} B: {over}"
    under = kube.cuda_probe(cluster, namespace, "limited", limit // 2)
    assert under["alloc"] == 0, f"{delivery}: under the quota of {limit} B: {under}"
