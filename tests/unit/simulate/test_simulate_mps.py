"""The simulator knows the mps strategy and class: MPS shares pack by their requests, like soft ones."""

from __future__ import annotations

from typing import Any

from support.simulate_cluster import nodes, pod


def mps(memory: str, cores: str) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "mps.carve.dev",
                        "capacity": {"requests": {"memory": memory, "cores": cores}},
                    },
                }
            ]
        }
    }


def test_mps_shares_pack_on_one_gpu_by_their_requests(run) -> None:
    trace = [pod(f"p{i}", 0, 100, mps("4Gi", "25")) for i in range(3)]
    result = run([nodes("n", 1, "1xT4", "mps")], trace)
    assert result.pods_scheduled == 3
    assert result.peak_gpus_busy == 1  # three 4Gi/25% shares of one T4


def test_mps_claims_do_not_land_on_soft_gpus(run) -> None:
    result = run([nodes("n", 1, "1xT4", "soft")], [pod("m", 0, 10, mps("4Gi", "25"))])
    assert (result.pods_scheduled, result.pods_never_fit) == (0, 1)
