"""The gate probe's taint goes on a slice of at most 64 devices, the most a slice with a tainted device may
hold from Kubernetes 1.35 (the API server refuses a bigger one, which would read as a failed probe): a slice
of 64 is tainted, one of 65 is sent as it is."""

from __future__ import annotations

from driver import names
from driver.plugin.publisher import PROBE_TAINT, with_probe_taint


def _slice(n: int) -> dict:
    devices = [{"name": f"gpu-{i}"} for i in range(n)]
    return {"metadata": {"name": "s"}, "spec": {"driver": names.DRIVER_NAME, "devices": devices}}


def test_a_slice_of_64_devices_takes_the_probe_taint_and_one_of_65_does_not():
    assert with_probe_taint(_slice(64))["spec"]["devices"][0]["taints"] == [PROBE_TAINT]
    assert with_probe_taint(_slice(65)) == _slice(65)
