"""The health policy (pure): XIDs, recovery, resets, taints per cluster, and build_slices with them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver import names
from driver.cluster import LocalCluster, fields_of_disabled_gates
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_node
from driver.plugin.health.policy import (
    APPLICATION_XIDS,
    CAUSE_LOST,
    CAUSE_PAGES,
    REASONS,
    HealthBook,
    HealthConfigError,
    TaintPolicy,
    parse_xids,
    reason_label,
    xid_cause,
)
from driver.plugin.health.taints import health_marks
from driver.plugin.publisher import GATE_TAINTS, Publisher

NODE = "node-a"


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS))
def test_application_xids_are_ignored(xid):
    assert xid_cause(xid, ()) is None


@pytest.mark.parametrize("xid", [48, 63, 64, 74, 79, 92, 94, 95, 119, 120])
def test_hardware_xids_make_the_gpu_unhealthy(xid):
    assert xid_cause(xid, ()) == f"xid-{xid}"


def test_extra_ignored_xids_are_honoured_and_bad_ones_refused():
    assert xid_cause(74, parse_xids("74, 92")) is None
    with pytest.raises(HealthConfigError, match="--health-ignore-xids: 'x7' is not an XID number"):
        parse_xids("13,x7")


@given(st.text(max_size=20))
def test_metric_reason_is_bounded(cause):
    assert reason_label(cause) in (*REASONS, "other")


def test_unhealthy_until_the_recovery_period_passes_without_a_bad_signal():
    book = HealthBook(recovery_s=10)
    book.track("GPU-a", 0)
    change = book.observe("GPU-a", "xid-79", now=100)
    assert change and not change.healthy and book.unhealthy() == {0: "xid-79"}
    assert book.observe("GPU-a", "xid-48", now=105) is None  # already unhealthy: no second flip
    assert book.tick(now=112) == []  # 7 s after the last XID
    recovered = book.tick(now=115)
    assert [(c.uuid, c.healthy) for c in recovered] == [("GPU-a", True)] and book.unhealthy() == {}


def test_a_level_signal_outranks_an_xid_and_a_reset_clears():
    book = HealthBook(recovery_s=10)
    book.track("GPU-a", 0)
    book.observe("GPU-a", "xid-79", now=1)
    book.observe("GPU-a", CAUSE_LOST, now=2)
    book.observe("GPU-a", "xid-48", now=3)
    assert book.unhealthy() == {0: CAUSE_LOST}
    assert [c.cause for c in book.reset(["GPU-a", "GPU-unknown"], now=4)] == [CAUSE_LOST]
    assert book.unhealthy() == {}


def test_unknown_gpus_are_ignored():
    book = HealthBook()
    assert book.observe("GPU-x", CAUSE_PAGES, now=1) is None


def test_taint_effects_per_cause_and_version():
    policy = TaintPolicy("None", "NoExecute")
    marks = health_marks({0: "xid-79", 1: CAUSE_LOST}, policy, taints_off=False, k8s_version="1.36")
    assert marks["taints"][0] == [{"key": "gpu.carve.dev/unhealthy", "value": "xid-79", "effect": "None"}]
    assert marks["taints"][1][0]["effect"] == "NoExecute"
    # 1.34 has no effect None: the warning-only taint is not published, the NoExecute one is.
    assert set(health_marks({0: "xid-79", 1: CAUSE_LOST}, policy, False, "1.34")["taints"]) == {1}
    assert health_marks({0: "xid-79"}, policy, taints_off=True, k8s_version="1.36") == {
        "withdrawn": frozenset({0})
    }
    assert health_marks({}, policy, False, "1.36") == {}


def test_build_slices_taints_every_device_of_the_gpu_and_withdraws_others():
    gpus = fake_node("2xA100-80GB,1xT4", NODE)
    taint = {"key": "gpu.carve.dev/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    slices = build_slices(
        NODE,
        gpus,
        {0: "mig", 1: "soft", 2: "exclusive"},
        Settings(),
        "1.36",
        1,
        taints={0: [taint]},
        withdrawn=frozenset({2}),
    )
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    uuid0 = next(g.uuid for g in gpus if g.index == 0)
    of0 = [d for d in devices if uuid0 in str(d["attributes"])]
    assert len(of0) > 10 and all(d["taints"] == [taint] for d in of0)  # every MIG placement + the GPU
    assert all("taints" not in d for d in devices if d not in of0)
    assert not any(d["name"].startswith("gpu-2") for d in devices)


def _publisher(cluster, marks):
    gpus = fake_node("1xA100-80GB,1xT4", NODE)
    return Publisher(
        cluster,
        NODE,
        lambda s, g: build_slices(NODE, gpus, s, Settings(), "1.36", g, **marks()),
        {0: "exclusive", 1: "exclusive"},
        sleep=lambda _s: None,
    )


def test_the_probe_finds_device_taints_off_and_the_gpu_is_withdrawn_instead():
    cluster = LocalCluster(drop_fields=fields_of_disabled_gates([GATE_TAINTS]), version=(1, 36))
    bad = {1: CAUSE_LOST}
    pub = None

    def marks():
        return health_marks(bad, TaintPolicy(), GATE_TAINTS in pub.gates_off, "1.36")

    pub = _publisher(cluster, marks)
    pub.publish()
    assert GATE_TAINTS in pub.gates_off
    names_ = [
        d["name"] for s in cluster.list_resource_slices(names.DRIVER_NAME, NODE) for d in s["spec"]["devices"]
    ]
    assert names_ == ["gpu-0"]


def test_with_taints_on_the_gpu_stays_published_tainted():
    cluster = LocalCluster(version=(1, 36))
    pub = None

    def marks():
        return health_marks({1: "xid-48"}, TaintPolicy(), GATE_TAINTS in pub.gates_off, "1.36")

    pub = _publisher(cluster, marks)
    pub.publish()
    assert GATE_TAINTS not in pub.gates_off
    devices = {
        d["name"]: d
        for s in cluster.list_resource_slices(names.DRIVER_NAME, NODE)
        for d in s["spec"]["devices"]
    }
    assert devices["gpu-1"]["taints"][0]["value"] == "xid-48" and "taints" not in devices["gpu-0"]


def test_node_event_names_the_cause_whether_tainted_or_withdrawn():
    from driver.plugin.health.policy import Change
    from driver.plugin.health.taints import health_event

    for withdrawn in (True, False):
        body = health_event(
            "n1", Change("GPU-1", 1, False, "xid-79"), "gpu-1", "why", withdrawn, "NoSchedule"
        )
        assert body["reason"] == "GpuUnhealthy" and "xid-79" in body["message"]
        assert ("withdrawn" in body["message"]) is withdrawn
    healthy = health_event("n1", Change("GPU-1", 1, True, "xid-79"), "gpu-1", "", False, "NoSchedule")
    assert healthy["reason"] == "GpuHealthy" and healthy["type"] == "Normal"
