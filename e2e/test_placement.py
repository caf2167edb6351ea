"""`--placement` on the real control plane (docs/allocate.md, "Placement"): the kube-scheduler takes the
first soft device that fits in published order, so the plugin's load order of its published soft devices is
what places slices. e2e-n1 has two soft GPUs (gpu-1, an A100-80GB, and gpu-2, a T4). With `spread` two
slices land on different GPUs; restarted with `binpack` (the same state: prepared memory read back from the
claims' limits files), a new slice joins the loaded GPU, where index order would have taken the idle one."""

from __future__ import annotations

import pytest

from driver import names
from e2e import kube

N1 = "e2e-n1"
CAPACITY = {"requests": {"memory": "2Gi", "cores": "10"}}


def _soft_order(cluster) -> list[str]:
    """e2e-n1's soft devices in the order the scheduler tries them (slices by name, devices as listed)."""
    slices = sorted(cluster.slices(N1), key=lambda s: s["metadata"]["name"])
    return [
        d["name"]
        for s in slices
        for d in s["spec"].get("devices") or []
        if next(iter(d["attributes"]["type"].values())) == names.TYPE_VGPU
    ]


def _wait_order(cluster, want: list[str]) -> None:
    kube.wait(f"{N1}'s soft devices published in order {want}", lambda: _soft_order(cluster) == want)


@pytest.fixture
def placement_node(cluster, gates_on):
    """e2e-n1's plugin restarted with the `--placement` the test asks for; the flags of before after."""
    if not gates_on:
        pytest.skip("soft slices need DRAConsumableCapacity (gates off here)")
    node = cluster.nodes[N1]
    extra = list(node.extra_plugin_args)

    def restart(placement: str) -> None:
        node.extra_plugin_args = [*extra, "--placement", placement]
        node.restart_plugin(kill=False)

    try:
        yield restart
    finally:
        node.extra_plugin_args = extra
        node.restart_plugin(kill=False)
        _wait_order(cluster, ["gpu-1", "gpu-2"])


def _place(api, namespace: str, pod: str) -> str:
    kube.create(api, namespace, kube.pod(pod, claim_template="soft", node=N1))
    kube.wait_running(api, namespace, pod)
    return kube.results(kube.claim_of(api, namespace, pod))[0]["device"]


def test_spread_puts_two_slices_on_two_gpus_and_binpack_on_the_loaded_one(
    cluster, api, namespace, placement_node
):
    request = [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_VGPU, "capacity": CAPACITY}}]
    kube.create(api, namespace, kube.template("soft", request))
    pods: list[str] = []
    try:
        placement_node("spread")
        _wait_order(cluster, ["gpu-1", "gpu-2"])  # nothing prepared: index order
        pods.append("s1")
        assert _place(api, namespace, "s1") == "gpu-1"
        _wait_order(cluster, ["gpu-2", "gpu-1"])  # the idle GPU first
        pods.append("s2")
        assert _place(api, namespace, "s2") == "gpu-2"  # spread: the other GPU

        # Free gpu-1; gpu-2 keeps s2. Index order would now give gpu-1 to the next slice; binpack, the
        # loaded gpu-2 (the restarted plugin reads s2's memory back from its limits file).
        kube.delete_pod(api, namespace, "s1")
        pods.remove("s1")
        placement_node("binpack")
        _wait_order(cluster, ["gpu-2", "gpu-1"])
        pods.append("s3")
        assert _place(api, namespace, "s3") == "gpu-2"
        pods.append("s4")
        assert _place(api, namespace, "s4") == "gpu-2"  # binpack: still the same GPU
    finally:
        for pod in pods:
            kube.delete_pod(api, namespace, pod)
