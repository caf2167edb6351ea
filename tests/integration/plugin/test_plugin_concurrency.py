"""Concurrency: 50 claims prepared and unprepared in parallel calls, and two processes preparing one claim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from support.plugin_harness import REPO, result

from driver import names


def test_fifty_claims_in_parallel(node, kubelet, plugin_factory):
    plugin_factory("0=soft,1=soft,exclusive", extra=("--split-count", "64"))
    claims = [
        node.put_claim(
            f"c{i}", [result("s", f"gpu-{i % 2}", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi"})]
        )
        for i in range(50)
    ]
    with ThreadPoolExecutor(50) as pool:
        outs = list(pool.map(lambda c: kubelet.prepare([c]), claims))
        # A second wave of the same claims, concurrently: answered from state, nothing written twice.
        again = list(pool.map(lambda c: kubelet.prepare([c]), claims))
    assert outs == again
    for c, out in zip(claims, outs, strict=True):
        assert out[c[2]]["error"] == ""
        assert out[c[2]]["devices"][0][3] == [
            names.cdi_device_id(c[2], f"gpu-{int(c[1][1:]) % 2}", out[c[2]]["devices"][0][4])
        ]
    assert node.spec_files() == sorted(names.cdi_spec_file_name(c[2]) for c in claims)
    assert sorted(node.checkpoint_claims()) == sorted(c[2] for c in claims)
    assert sorted(node.claim_dirs()) == sorted(c[2] for c in claims)

    with ThreadPoolExecutor(50) as pool:
        errors = list(pool.map(lambda c: kubelet.unprepare([c]), claims))
    assert all(e == {c[2]: ""} for c, e in zip(claims, errors, strict=True))
    assert node.leftovers() == {"specs": [], "claim_dirs": [], "checkpoint": {}}


PREPARE_AT = """
import json, sys, time
from pathlib import Path
from driver.devices import build_slices
from driver.gpu import discover
from driver.gpu.mig import set_mig_mode
from driver.plugin.claims.catalog import catalog_from_slices
from driver.plugin.state.checkpoint import Checkpoint
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.container.edits import HostLayout
from driver.plugin.filecluster import FileCluster
from driver.plugin.mig.ops import NvmlMig
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.state.recovery import recover

root, ns, name, uid, at = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
gpus = discover("fake:2xA100-80GB,1xT4", "node-a")
set_mig_mode(gpus[0].uuid, True)
strategies = {0: "mig", 1: "soft", 2: "exclusive"}
catalog = catalog_from_slices(build_slices("node-a", gpus, strategies, None, "1.36"))
preparer = Preparer(
    PreparerSettings("node-a", root / "plugin", root / "cdi", root / "limiter"),
    FileCluster(root / "cluster"),
    HostLayout.scan(root / "driver", root / "fake-proc", hook_dir=root / "limiter", driver_required=False),
    NvmlMig(), lambda: catalog,
    Checkpoint(root / "plugin" / "checkpoint.json", "boot-1"),
)
recover(preparer)
time.sleep(max(0.0, at - time.time()))  # both processes start preparing at the same instant
out = preparer.prepare([ClaimRef(ns, name, uid)])[uid]
print(json.dumps({"error": out.error, "ids": [d.cdi_ids for d in out.devices]}))
"""


def test_two_processes_preparing_the_same_claim_at_once_prepare_it_once(node, tmp_path):
    # Two plugin processes on one node (a rolling update) get the kubelet's call for the same claim at the
    # same moment: the node's file lock serialises them and the second answers what the first prepared.
    node.plugin_dir.mkdir(mode=0o700)
    claim = node.put_claim(
        "both",
        [
            result("m", "gpu-0-mig-1g10gb-6"),
            result("s", "gpu-1", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi"}),
        ],
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARVE_FAKE_")}
    env.update(
        CARVE_FAKE_SEED="node-a",
        CARVE_FAKE_STATE=str(node.plugin_dir / "fake-gpus.state"),
        CARVE_FAKE_PROC_ROOT=str(node.root / "fake-proc"),  # the MIG capability files the specs name
    )
    at = time.time() + 4.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PREPARE_AT, str(node.root), *claim, str(at)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 0, stderr
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1] and outs[0]["error"] == "" and len(outs[0]["ids"]) == 2
    assert node.spec_files() == [names.cdi_spec_file_name(claim[2])]
    assert list(node.checkpoint_claims()) == [claim[2]] and node.claim_dirs() == [claim[2]]
    assert len(node.mig_instances()) == 1
    journal = json.loads((node.plugin_dir / "mig-journal.json").read_text())["instances"]
    assert [(e["claim"], e["start"], e["state"]) for e in journal] == [(claim[2], 6, "created")]
