"""Table tests of request parsing (HAMi names and defaults), per-GPU fit, and node scores."""

from __future__ import annotations

import pytest
from support.legacy_node import gpu_pod

from driver import names
from driver.legacy.fit import Usage, fit_pod, node_score
from driver.legacy.records import GpuInfo, NodeGpus
from driver.legacy.request import Defaults, RequestError, pod_request

GPU, MEM, PCT, CORES, PRIO = (
    names.LEGACY_GPU,
    names.LEGACY_GPUMEM,
    names.LEGACY_GPUMEM_PERCENTAGE,
    names.LEGACY_GPUCORES,
    names.LEGACY_PRIORITY,
)


def node(*mem_mib: int, split: int = 10, product: str = "NVIDIA A100", healthy=None) -> NodeGpus:
    return NodeGpus(
        gpus=tuple(
            GpuInfo(
                uuid=f"GPU-{i}",
                index=i,
                minor=i,
                product=product if isinstance(product, str) else product[i],
                memoryMiB=m,
                split=split,
                healthy=True if healthy is None else healthy[i],
                pciBusID=f"0000:{i:02x}:00.0",
            )
            for i, m in enumerate(mem_mib)
        )
    )


DEFAULTS = Defaults()


def request(limits: dict, annotations: dict | None = None, defaults: Defaults = DEFAULTS):
    return pod_request(gpu_pod("p", [("main", limits)], annotations), defaults)


@pytest.mark.parametrize(
    ("limits", "defaults", "expected"),
    [
        # (count, memory MiB, percent, cores, priority)
        ({GPU: 1}, Defaults(), (1, 0, 100, 100, "high")),  # gpu only: whole exclusive card
        ({GPU: 2, MEM: 4000}, Defaults(), (2, 4000, 0, 0, "high")),  # gpu+gpumem: no SM cap
        ({GPU: 1, CORES: 30}, Defaults(), (1, 0, 100, 30, "high")),  # gpu+gpucores: whole memory
        ({GPU: 1, PCT: 50}, Defaults(), (1, 0, 50, 0, "high")),
        ({GPU: 1, PCT: 100}, Defaults(), (1, 0, 100, 100, "high")),
        ({MEM: 2000}, Defaults(), (1, 2000, 0, 0, "high")),  # gpumem only: default gpu count
        ({MEM: 2000}, Defaults(gpu_num=2), (2, 2000, 0, 0, "high")),
        ({GPU: 1}, Defaults(memory_mib=8000, cores=10), (1, 8000, 0, 100, "high")),
        ({GPU: 1, MEM: 1000}, Defaults(cores=10), (1, 1000, 0, 10, "high")),
        ({GPU: 1, MEM: 1000, PRIO: 1}, Defaults(), (1, 1000, 0, 0, "low")),
        ({GPU: 1, MEM: 1000, PRIO: 0}, Defaults(), (1, 1000, 0, 0, "high")),
    ],
)
def test_request_defaults_follow_hami(limits, defaults, expected):
    (c,) = request(limits, defaults=defaults).containers
    assert (c.count, c.memory_mib, c.percent, c.cores, c.priority) == expected


def test_containers_without_gpu_are_skipped_and_init_comes_first():
    pod = gpu_pod("p", [("main", {GPU: 1}), ("side", {"cpu": "1"}), ("init-a", {GPU: 1, MEM: 10})])
    got = pod_request(pod)
    assert [(c.name, c.init) for c in got.containers] == [("init-a", True), ("main", False)]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({GPU: "1.5"}, "whole number"),
        ({GPU: 1, MEM: "lots"}, "not a quantity"),
        ({GPU: 1, PCT: 101}, "over 100"),
        ({GPU: 1, CORES: 150}, "over 100"),
    ],
)
def test_bad_requests_name_the_container_and_resource(limits, message):
    with pytest.raises(RequestError, match=f"pod team/p: container main: .*{message}"):
        request(limits)


LOW = Defaults(priority="low")


@pytest.mark.parametrize(
    ("limits", "defaults", "namespace", "expected"),
    [
        ({GPU: 1}, Defaults(), "team", "high"),  # HAMi's default: high
        ({GPU: 1}, LOW, "team", "low"),  # the admin's default applies to pods naming none
        ({GPU: 1, PRIO: 1}, LOW, "team", "low"),  # lower than (or equal to) the default: always
        ({GPU: 1, PRIO: 0}, Defaults(), "team", "high"),  # a high default bounds nothing
        ({GPU: 1, PRIO: 0}, Defaults(priority="low", high_priority_namespaces=("team",)), "team", "high"),
        ({GPU: 1, PRIO: 0}, Defaults(priority="low", high_priority_namespaces=("*",)), "any", "high"),
        ({GPU: 1, PRIO: 0}, Defaults(priority="low", high_priority_namespaces=("team",)), "other", None),
        ({GPU: 1, PRIO: 0}, LOW, "team", None),
    ],
)
def test_priority_is_bounded_by_the_admin(limits, defaults, namespace, expected):
    pod = gpu_pod("p", [("main", limits)], ns=namespace)
    if expected is None:
        with pytest.raises(RequestError) as e:
            pod_request(pod, defaults)
        assert f"pod {namespace}/p: container main: {PRIO}: 0 (high) is not allowed in namespace" in str(
            e.value
        )
        assert "default priority is low" in str(e.value)
    else:
        (c,) = pod_request(pod, defaults).containers
        assert c.priority == expected


def test_bad_policy_annotation_is_an_error():
    with pytest.raises(RequestError, match=r"hami\.io/gpu-scheduler-policy"):
        request({GPU: 1}, {names.HAMI_GPU_POLICY: "fastest"})


def fit(limits, n, usage=None, annotations=None):
    return fit_pod(request(limits, annotations), n, usage or {})


def devices(f):
    return [[(d.uuid, d.memoryMiB, d.cores) for d in c.devices] for c in f.containers]


@pytest.mark.parametrize(
    ("limits", "usage", "ok"),
    [
        ({GPU: 1, MEM: 1000}, {"GPU-0": Usage(9, 0, 0)}, True),
        ({GPU: 1, MEM: 1000}, {"GPU-0": Usage(10, 0, 0)}, False),  # split count = containers per GPU
        ({GPU: 1, MEM: 1001}, {"GPU-0": Usage(1, 9000, 0)}, False),  # memory
        ({GPU: 1, MEM: 1000}, {"GPU-0": Usage(1, 9000, 0)}, True),
        ({GPU: 1, MEM: 10, CORES: 71}, {"GPU-0": Usage(1, 0, 30)}, False),  # cores
        ({GPU: 1, MEM: 10, CORES: 70}, {"GPU-0": Usage(1, 0, 30)}, True),
        ({GPU: 1}, {"GPU-0": Usage(1, 10, 0)}, False),  # exclusive needs an unused GPU
        ({GPU: 1, MEM: 10}, {"GPU-0": Usage(1, 0, 100)}, False),  # 0 cores on a GPU whose cores are taken
        ({GPU: 1, PCT: 50}, {"GPU-0": Usage(1, 5000, 0)}, True),
        ({GPU: 1, PCT: 51}, {"GPU-0": Usage(1, 5000, 0)}, False),
    ],
)
def test_fit_rules_per_gpu(limits, usage, ok):
    assert fit(limits, node(10000), usage).ok is ok


def test_count_means_distinct_gpus():
    assert not fit({GPU: 3, MEM: 10}, node(10000, 10000)).ok
    f = fit({GPU: 2, MEM: 10}, node(10000, 10000))
    assert sorted(d[0] for d in devices(f)[0]) == ["GPU-0", "GPU-1"]


def test_unhealthy_gpu_is_skipped_and_reason_says_so():
    f = fit({GPU: 1, MEM: 10}, node(10000, healthy=[False]))
    assert not f.ok and "GPU-0: unhealthy" in f.reason


def test_type_and_uuid_annotations():
    n = node(10000, 10000, product=("NVIDIA A100", "NVIDIA T4"))
    assert devices(fit({GPU: 1, MEM: 10}, n, annotations={names.HAMI_USE_GPUTYPE: "t4"}))[0][0][0] == "GPU-1"
    assert (
        devices(fit({GPU: 1, MEM: 10}, n, annotations={names.HAMI_NOUSE_GPUTYPE: "A100"}))[0][0][0] == "GPU-1"
    )
    assert (
        devices(fit({GPU: 1, MEM: 10}, n, annotations={names.HAMI_USE_GPUUUID: "GPU-0"}))[0][0][0] == "GPU-0"
    )
    assert (
        devices(fit({GPU: 1, MEM: 10}, n, annotations={names.HAMI_NOUSE_GPUUUID: "GPU-0"}))[0][0][0]
        == "GPU-1"
    )
    f = fit({GPU: 1, MEM: 10}, n, annotations={names.HAMI_USE_GPUTYPE: "H100"})
    assert not f.ok and "use-gputype" in f.reason


def test_gpu_policy_binpack_fills_the_used_gpu_spread_the_empty_one():
    usage = {"GPU-1": Usage(1, 2000, 0)}
    spread = fit({GPU: 1, MEM: 10}, node(10000, 10000), usage, {names.HAMI_GPU_POLICY: "spread"})
    binpack = fit({GPU: 1, MEM: 10}, node(10000, 10000), usage, {names.HAMI_GPU_POLICY: "binpack"})
    assert devices(spread)[0][0][0] == "GPU-0"
    assert devices(binpack)[0][0][0] == "GPU-1"


def test_containers_of_one_pod_see_each_other():
    pod = gpu_pod("p", [("a", {GPU: 1, MEM: 6000}), ("b", {GPU: 1, MEM: 6000})])
    f = fit_pod(pod_request(pod), node(10000, 10000), {})
    assert f.ok
    assert {c.devices[0].uuid for c in f.containers} == {"GPU-0", "GPU-1"}
    assert not fit_pod(pod_request(pod), node(10000), {}).ok


@pytest.mark.parametrize(("policy", "fuller_wins"), [("binpack", True), ("spread", False)])
def test_node_score_binpack_and_spread(policy, fuller_wins):
    req = request({GPU: 1, MEM: 1000}, {names.HAMI_NODE_POLICY: policy})
    n = node(10000)
    full_usage = {"GPU-0": Usage(1, 8000, 0)}
    full = node_score(req, n, full_usage, fit_pod(req, n, full_usage))
    empty = node_score(req, n, {}, fit_pod(req, n, {}))
    assert min(full, empty) >= 0 and max(full, empty) <= 10
    assert (full > empty) is fuller_wins
