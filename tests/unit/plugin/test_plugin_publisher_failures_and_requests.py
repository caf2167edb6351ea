"""The publisher when the API server keeps failing, and when the node's strategies change: after its last
attempt it gives up with an error naming the node and the server's last answer (the plugin reports it and
tries again later), backing off between attempts by doubling up to 10 s; a new request applies the fallbacks
of the gates already found off and says what was asked before; and the dry-run probe's taint goes only on a
slice that may hold a tainted device (at most 64 devices, none tainted already), as the API server allows."""

from __future__ import annotations

import pytest

from driver import names
from driver.cluster import LocalCluster, fields_of_disabled_gates
from driver.cluster.base import ClusterError
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_node
from driver.plugin.publisher import (
    GATE_CONSUMABLE,
    PROBE_TAINT,
    PROBE_TAINT_MAX_DEVICES,
    Publisher,
    PublishError,
    dropped_gates,
    with_probe_taint,
)

NODE = "node-a"


def _publisher(cluster, strategies, sleeps=None, attempts=6):
    gpus = fake_node("2xA100-80GB", NODE)
    return Publisher(
        cluster,
        NODE,
        lambda s, g: build_slices(NODE, gpus, s, Settings(), "1.36", g),
        strategies,
        attempts=attempts,
        sleep=(sleeps.append if sleeps is not None else (lambda _s: None)),
    )


def test_a_server_that_keeps_failing_ends_in_an_error_naming_the_node_and_its_answer():
    cluster = LocalCluster(version=(1, 36))
    calls = []

    def refused(obj, dry_run=False):
        calls.append(dry_run)
        raise ClusterError(f"admission webhook refused call {len(calls)}", "ResourceSlice", status=500)

    cluster.create_resource_slice = refused
    sleeps: list[float] = []
    pub = _publisher(cluster, {0: "exclusive", 1: "exclusive"}, sleeps, attempts=10)
    with pytest.raises(PublishError) as e:
        pub.publish()
    last = len(calls)
    assert str(e.value) == (
        f"publishing ResourceSlices of node {NODE}: ClusterError: admission webhook refused call {last}"
    )
    assert pub.last_error == f"ClusterError: admission webhook refused call {last}"
    # no sleep after the last attempt; the delay doubles from 0.1 s and stops at 10 s
    assert sleeps == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0]
    assert cluster.list_resource_slices(names.DRIVER_NAME, NODE) == []


def test_a_publish_that_succeeds_after_failures_clears_its_error():
    cluster = LocalCluster(version=(1, 36))
    real, failures = cluster.create_resource_slice, iter([True])

    def flaky(obj, dry_run=False):
        if not dry_run and next(failures, False):
            raise ClusterError("etcd timeout", "ResourceSlice", status=504)
        return real(obj, dry_run=dry_run)

    cluster.create_resource_slice = flaky
    pub = _publisher(cluster, {0: "exclusive", 1: "exclusive"})
    assert pub.publish() and pub.last_error == ""


def test_a_new_request_applies_the_gates_already_found_off_and_returns_the_old_one():
    cluster = LocalCluster(version=(1, 36), drop_fields=fields_of_disabled_gates([GATE_CONSUMABLE]))
    pub = _publisher(cluster, {0: "exclusive", 1: "soft"})
    pub.publish()
    assert GATE_CONSUMABLE in pub.gates_off
    before = pub.request({0: "soft", 1: "exclusive"})
    assert before == {0: "exclusive", 1: "soft"}
    assert pub.requested == {0: "soft", 1: "exclusive"}
    assert pub.effective == {0: names.STRATEGY_SLOTS, 1: "exclusive"}  # soft needs the gate that is off
    asked = {0: "soft", 1: "soft"}
    assert pub.request(asked) == {0: "soft", 1: "exclusive"}
    asked[0] = "mig"
    assert pub.requested == {0: "soft", 1: "soft"}  # the caller's dict is copied


def _slice(n: int, tainted: bool = False) -> dict:
    devices = [{"name": f"gpu-{i}"} for i in range(n)]
    if tainted and devices:
        devices[0]["taints"] = [{"key": "gpu.carve.dev/unhealthy", "effect": "NoSchedule"}]
    return {"metadata": {"name": "s"}, "spec": {"driver": names.DRIVER_NAME, "devices": devices}}


@pytest.mark.parametrize("n", [1, PROBE_TAINT_MAX_DEVICES])
def test_the_probe_taints_the_first_device_of_a_slice_that_may_hold_one(n):
    plain = _slice(n)
    probed = with_probe_taint(plain)
    assert probed["spec"]["devices"][0] == {"name": "gpu-0", "taints": [PROBE_TAINT]}
    assert probed["spec"]["devices"][1:] == plain["spec"]["devices"][1:]
    assert "taints" not in plain["spec"]["devices"][0]  # the slice to publish is not changed
    # a server that drops the taint has the gate off; one that keeps it has it on
    assert dropped_gates([probed], [plain]) == {"DRADeviceTaints"}
    assert dropped_gates([probed], [probed]) == set()


@pytest.mark.parametrize(("n", "tainted"), [(0, False), (PROBE_TAINT_MAX_DEVICES + 1, False), (2, True)])
def test_the_probe_leaves_a_slice_that_cannot_or_need_not_take_its_taint(n, tainted):
    s = _slice(n, tainted)
    assert with_probe_taint(s) == _slice(n, tainted)


def test_gates_are_read_only_from_slices_the_server_returned():
    want = _slice(2)
    want["spec"]["devices"][0]["allowMultipleAllocations"] = True
    other = {"metadata": {"name": "other"}, "spec": {"devices": []}}
    assert dropped_gates([want], [other]) == set()  # the server did not return it: nothing to compare
    assert dropped_gates([want], [_slice(2)]) == {GATE_CONSUMABLE}
    # a slice the server did not return says nothing, and the ones after it are still compared
    assert dropped_gates([other, want], [_slice(2)]) == {GATE_CONSUMABLE}
