"""`carve status` on the real control plane: a pod holding a soft slice (or a slot with the alpha gates off)
shows up as one row with its node, GPU, pod, container and claim, read through the real API server; the
e2e cluster's plugin pods name no metrics port (the plugins run as host processes, whose metrics
e2e/test_monitoring.py scrapes), so the used columns are unknown (`-`, null)."""

from __future__ import annotations

import json
import subprocess
import sys

from e2e import kube
from e2e.cluster.versions import REPO

N1 = "e2e-n1"


def _status(cluster, *args: str) -> subprocess.CompletedProcess:
    entry = "import sys; from driver.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", entry, "status", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )


def test_status_shows_the_pod_holding_a_share(cluster, api, namespace, gates_on):
    kube.create(api, namespace, kube.template("held", kube.soft_or_slot(gates_on)))
    kube.create(api, namespace, kube.pod("holder", claim_template="held", node=N1, containers=2))
    kube.wait_running(api, namespace, "holder")
    claim = kube.claim_of(api, namespace, "holder")
    (result,) = kube.results(claim)

    done = _status(cluster, "-n", namespace, "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["devices"]
    assert len(rows) == 1, rows
    row = rows[0]
    assert (row["node"], row["namespace"], row["pod"], row["claim"]) == (
        N1, namespace, "holder", claim["metadata"]["name"]
    )
    assert row["container"] == "c0,c1" and row["device"] == result["device"]
    assert row["strategy"] == ("soft" if gates_on else "slots") and row["enforcement"] == "limiter"
    assert row["gpu_uuid"].startswith("GPU-") and row["gpu_index"] is not None
    assert row["memory_limit_bytes"] and row["memory_used_bytes"] is None  # the pods name no metrics port

    table = _status(cluster, "--pod", "holder")
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.splitlines()
    assert header.split()[0] == "NODE" and "holder" in line.split()
    # No pod of that name, and this namespace has no GPU budget (docs/status.md, -o json): both lists empty.
    nobody = _status(cluster, "-n", namespace, "--pod", "nobody", "-o", "json")
    assert json.loads(nobody.stdout) == {"devices": [], "budgets": []}
