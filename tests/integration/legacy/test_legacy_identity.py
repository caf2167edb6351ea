"""Pod identity at Allocate is exact: two pods of different sizes bound to one node at the same moment,
admitted and started concurrently, 200 rounds; each container always gets its own pod's limits and GPUs."""

from __future__ import annotations

import random
import threading

from support.legacy_node import LegacyNode, gpu_pod

from driver import names

MIB = 1024**2
ROUNDS = 200


def _parallel(*fns):
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(fns))

    def wrap(fn):
        try:
            barrier.wait()
            fn()
        except BaseException as e:  # re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _run_round(node: LegacyNode, pods: dict, r: int, rng: random.Random) -> dict:
    """Bind both pods at once, admit both at once, start both containers at once in a random order."""
    out: dict = {"started": {}}
    _parallel(*(lambda n=n: out.__setitem__(n, node.schedule(pods[n])) for n in pods))
    if any(out[n]["Error"] for n in pods):
        return out
    _parallel(*(lambda n=n: node.admit(pods[n]) for n in pods))
    order = list(pods)
    rng.shuffle(order)
    start = node.kubelet.start_container
    _parallel(*(lambda n=n: out["started"].__setitem__(n, start("team", f"{n}-{r}", "main")) for n in order))
    return out


def test_two_pods_bound_together_never_swap_limits_or_gpus():
    node = LegacyNode(gpus=2, split=4)
    rng = random.Random(7)
    try:
        node.start_plugin()
        for r in range(ROUNDS):
            sizes = {"small": 1000 + r, "big": 30000 + r}
            pods = {
                name: gpu_pod(f"{name}-{r}", [("main", {names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: mem})])
                for name, mem in sizes.items()
            }
            binds = _run_round(node, pods, r, rng)
            started = binds.pop("started")
            assert binds == {"small": {"Error": ""}, "big": {"Error": ""}}, binds
            for name, mem in sizes.items():
                env = started[name].env
                assert env["CARVE_MEMORY_LIMIT_0"] == str(mem * MIB), (r, name, env)
                assigned = node.extender.state.assignment(f"uid-{name}-{r}").containers[0].devices[0].uuid
                gpu = next(g for g in node.gpus if g.uuid == assigned)
                gpu_nodes = [n["path"] for n in started[name].device_nodes if n["path"][11:].isdigit()]
                assert gpu_nodes == [f"/dev/nvidia{gpu.minor}"], (r, name, gpu_nodes)
            for name in pods:
                node.kubelet.remove("team", f"{name}-{r}")
                node.api.delete_pod("team", f"{name}-{r}")
            node.extender.state.resync(collect=True)
            assert not node.api.configmaps  # the finished pods' records are collected
    finally:
        node.close()
