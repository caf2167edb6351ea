"""The plugin process against the HTTP stand-in of the API server, through the real `kubernetes` client:
publishing with a gate off (fallback), a conflict retried, and a prepare that reads the claim over HTTP."""

from __future__ import annotations

from support.apiserver_standin import ApiServerStandIn
from support.plugin_harness import NODE, PluginProcess, result

from driver import names
from driver.cluster import fields_of_disabled_gates


def test_gates_off_fall_back_and_prepare_reads_the_claim_over_http(node, kubelet, tmp_path):
    off = fields_of_disabled_gates(["DRAConsumableCapacity", "DRAPartitionableDevices"])
    with ApiServerStandIn(drop_fields=off) as server:
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        # The first write of a slice loses a race: the plugin must re-read and retry.
        server.fail_next("POST", "/apis/resource.k8s.io/v1/resourceslices", code=409, reason="Conflict")
        plugin = PluginProcess(
            node,
            "0=mig,1=soft,exclusive",
            extra=("--cluster", "kube", "--kubeconfig", str(kubeconfig), "--k8s-version", "1.34"),
        )
        plugin.start()
        try:
            log = plugin.log()
            assert "event=publish.retry" in log
            assert "event=publish.gate-off" in log and "DRAConsumableCapacity" in log
            assert "found_by=" in log and "dry-run" in log
            # Not only a log line: a Node Event and a metric say so (issue 29).
            events = [e for e in server.objects.list("events") if e.get("reason") == "FeatureGatesOff"]
            assert len(events) == 1, events
            assert events[0]["involvedObject"]["kind"] == "Node" and events[0]["type"] == "Warning"
            message = events[0]["message"]
            assert "DRAConsumableCapacity" in message and "GPU 1: soft->slots" in message
            dry_runs = [r for r in server.requests if r.method == "POST" and r.query.get("dryRun") == ["All"]]
            writes = [
                r.body
                for r in server.requests
                if r.method in ("POST", "PUT") and r not in dry_runs and "/resourceslices" in r.path
            ]
            assert dry_runs and writes
            for body in writes:  # the scheduler never saw a device the node cannot serve
                assert not body["spec"].get("sharedCounters")
                assert not any(d.get("allowMultipleAllocations") for d in body["spec"].get("devices", []))
            devices = [d for s in server.slices().values() for d in s["spec"].get("devices", [])]
            device_names = {d["name"] for d in devices}
            assert "gpu-1-slot-0" in device_names and "gpu-0" in device_names
            assert not any("-mig-" in n for n in device_names)
            assert not any(d.get("allowMultipleAllocations") for d in devices)
            pools = {s["spec"]["pool"]["generation"] for s in server.slices().values()}
            assert pools == {1}  # one generation across the pool, written once

            stored = server.put_claim(
                {
                    "metadata": {"name": "two-slots", "namespace": "ml"},
                    "spec": {"devices": {"requests": [{"name": "s"}]}},
                    "status": {
                        "allocation": {
                            "devices": {"results": [result("s", "gpu-1-slot-0"), result("s", "gpu-1-slot-1")]}
                        }
                    },
                }
            )
            claim = ("ml", "two-slots", stored["metadata"]["uid"])
            out = kubelet.prepare([claim])
            assert out[claim[2]]["error"] == ""
            assert [d[2] for d in out[claim[2]]["devices"]] == ["gpu-1-slot-0", "gpu-1-slot-1"]
            assert {d[1] for d in out[claim[2]]["devices"]} == {NODE}
            assert node.spec_files() == [names.cdi_spec_file_name(claim[2])]
            missing = ("ml", "absent", "00000000-0000-0000-0000-000000000000")
            assert "not found" in kubelet.prepare([missing])[missing[2]]["error"]
            assert kubelet.unprepare([claim]) == {claim[2]: ""}
        finally:
            plugin.stop()
