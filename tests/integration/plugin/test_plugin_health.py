"""GPU health end to end in the plugin process: an XID injected into the fake NVML taints every device of
its GPU, the kubelet's health stream (v1 and v1alpha1) reports them unhealthy with the cause, a Node Event
is written, and recovery clears it all."""

from __future__ import annotations

import json
import time

import pytest
from support.plugin_harness import NODE

TAINT_KEY = "gpu.carve.dev/unhealthy"


def _gpu_uuid(d: dict) -> str:
    a = {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
    return a.get("parentUUID") or a["uuid"]


def _taints_by_gpu(node) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for d in node.devices():
        vals = {f"{t['value']}:{t['effect']}" for t in d.get("taints") or [] if t["key"] == TAINT_KEY}
        out.setdefault(_gpu_uuid(d), set()).update(vals or {"-"})
    return out


def _wait(predicate, timeout_s: float = 20.0, what: str = ""):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _events(node) -> list[dict]:
    d = node.cluster_dir / "events"
    return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.exists() else []


@pytest.fixture
def fault_files(tmp_path):
    xid = tmp_path / "xid"
    xid.write_text("")
    return {"CARVE_FAKE_XID_FILE": str(xid), "CARVE_FAKE_LOST_FILE": str(tmp_path / "lost")}, xid, tmp_path


def test_fatal_xid_taints_every_device_of_its_gpu_and_recovery_clears_it(
    node, kubelet, plugin_factory, fault_files
):
    env, xid, _ = fault_files
    plugin = plugin_factory(
        "0=mig,1=soft,exclusive", env, ("--health-recovery-seconds", "3", "--health-interval", "0.2")
    )
    plugin.wait_for_log("event=health.started")
    uuids = sorted(_taints_by_gpu(node))
    by_index = {}
    for d in node.devices():
        a = {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
        by_index[a["index"]] = _gpu_uuid(d)
    assert all(v == {"-"} for v in _taints_by_gpu(node).values())
    stream = kubelet.watch_health()  # the registration lists v1 first: a 1.37 kubelet picks it
    assert stream.service == "v1.DRAResourceHealth"
    try:
        with xid.open("a") as f:
            f.write("0 79\n")  # GPU 0 (MIG placements and the whole GPU) falls off the bus
        tainted = _wait(
            lambda: (t := _taints_by_gpu(node))[by_index[0]] == {"xid-79:NoSchedule"} and t,
            what="GPU 0's devices to be tainted",
        )
        assert all(v == {"-"} for u, v in tainted.items() if u != by_index[0]), tainted
        mig_devices = [d for d in node.devices() if _gpu_uuid(d) == by_index[0]]
        assert len(mig_devices) > 1  # every placement, not just the whole GPU
        msg = stream.until(lambda m: any(d.health == stream.pb.UNHEALTHY for d in m.devices))
        bad = {d.device.device_name: d.message for d in msg.devices if d.health == stream.pb.UNHEALTHY}
        assert set(bad) == {d["name"] for d in mig_devices}
        assert all("critical XID 79" in m and "fallen off the bus" in m for m in bad.values())
        assert all(d.device.pool_name == NODE for d in msg.devices)
        unhealthy_events = [e for e in _events(node) if e["reason"] == "GpuUnhealthy"]
        assert unhealthy_events and unhealthy_events[0]["involvedObject"]["kind"] == "Node"
        assert "xid-79" in unhealthy_events[0]["message"]
        # Recovery: 3 s without a bad signal.
        _wait(lambda: all(v == {"-"} for v in _taints_by_gpu(node).values()), what="taints to clear")
        stream.until(lambda m: all(d.health == stream.pb.HEALTHY for d in m.devices))
        assert any(e["reason"] == "GpuHealthy" for e in _events(node))
    finally:
        stream.close()
    assert uuids


def test_application_xid_is_ignored(node, plugin_factory, fault_files):
    env, xid, _ = fault_files
    plugin = plugin_factory("exclusive", env, ("--health-interval", "0.2"))
    plugin.wait_for_log("event=health.started")
    with xid.open("a") as f:
        f.write("1 13\n2 31\n")
    plugin.wait_for_log(r"event=health.xid .*xid=31 action=\"ignored")
    assert all(v == {"-"} for v in _taints_by_gpu(node).values())
    assert not [e for e in _events(node) if e["reason"] == "GpuUnhealthy"]


def test_lost_gpu_gets_the_lost_effect_and_the_v1alpha1_stream_says_so(
    node, kubelet, plugin_factory, fault_files
):
    env, _, tmp = fault_files
    plugin = plugin_factory(
        "exclusive", env, ("--health-interval", "0.2", "--health-lost-effect", "NoExecute")
    )
    plugin.wait_for_log("event=health.started")
    stream = kubelet.watch_health("v1alpha1.DRAResourceHealth")  # as a 1.34-1.36 kubelet calls it
    try:
        (tmp / "lost").write_text("2")

        def lost_tainted():
            t = _taints_by_gpu(node)
            return t if any(v == {"gpu-lost:NoExecute"} for v in t.values()) else None

        tainted = _wait(lost_tainted, what="the lost GPU's taint")
        assert sorted(len(v - {"-"}) for v in tainted.values()) == [0, 0, 1]
        msg = stream.until(lambda m: any(d.health == stream.pb.UNHEALTHY for d in m.devices))
        assert [d.device.device_name for d in msg.devices if d.health == stream.pb.UNHEALTHY] == ["gpu-2"]
    finally:
        stream.close()


def test_deleting_the_state_file_resets_and_a_restart_remembers(node, plugin_factory, fault_files):
    env, xid, _ = fault_files
    extra = ("--health-interval", "0.2", "--health-recovery-seconds", "3600")
    plugin = plugin_factory("exclusive", env, extra)
    plugin.wait_for_log("event=health.started")
    with xid.open("a") as f:
        f.write("1 48\n")
    _wait(lambda: any(v == {"xid-48:NoSchedule"} for v in _taints_by_gpu(node).values()), what="taint")
    plugin.stop()
    # A restarted plugin still holds the GPU unhealthy (health.json), though NVML no longer says so.
    plugin = plugin_factory("exclusive", env, extra)
    plugin.wait_for_log("event=health.started")
    assert any(v == {"xid-48:NoSchedule"} for v in _taints_by_gpu(node).values())
    (node.plugin_dir / "health.json").unlink()
    plugin.wait_for_log("event=health.reset")
    _wait(lambda: all(v == {"-"} for v in _taints_by_gpu(node).values()), what="reset to clear the taint")


def test_with_device_taints_off_the_gpu_is_withdrawn_and_an_event_says_so(
    node, plugin_factory, fault_files, tmp_path
):
    from support.apiserver_standin import ApiServerStandIn

    from driver.cluster import fields_of_disabled_gates

    env, xid, _ = fault_files
    with ApiServerStandIn(drop_fields=fields_of_disabled_gates(["DRADeviceTaints"])) as server:
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        extra = ("--cluster", "kube", "--kubeconfig", str(kubeconfig), "--k8s-version", "1.35")
        extra += ("--health-interval", "0.2", "--health-recovery-seconds", "2")
        plugin = plugin_factory("exclusive", env, extra)
        plugin.wait_for_log("event=publish.done")
        assert "DRADeviceTaints" in plugin.wait_for_log(r"event=publish.gate-off[^\n]*").group(0)

        def published():
            return sorted(d["name"] for s in server.slices().values() for d in s["spec"].get("devices") or [])

        assert published() == ["gpu-0", "gpu-1", "gpu-2"]
        with xid.open("a") as f:
            f.write("1 94\n")
        _wait(lambda: published() == ["gpu-0", "gpu-2"], what="gpu-1 withdrawn")
        plugin.wait_for_log("event=health.withdrawn")
        bodies = [r.body for r in server.requests if r.method == "POST" and r.path.endswith("/events")]
        unhealthy = [b for b in bodies if b.get("reason") == "GpuUnhealthy"]
        assert unhealthy and "withdrawn from the ResourceSlices" in unhealthy[0]["message"]
        _wait(lambda: published() == ["gpu-0", "gpu-1", "gpu-2"], what="gpu-1 back after recovery")
