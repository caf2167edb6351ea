"""A legacy container gets exactly what the DRA preparer gives a soft claim of the same size on the same GPU:
the same env, mounts and device nodes, up to the claim's own uid and directory."""

from __future__ import annotations

import re
from pathlib import Path

from support.legacy_node import LegacyNode, gpu_pod

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.container.edits import HostLayout
from driver.plugin.state.checkpoint import Checkpoint

MIB = 1024**2


def dra_edits(node: LegacyNode, memory_mib: int, cores: int) -> tuple[str, dict]:
    gpu = node.gpus[0]
    catalog = {
        gpu.name: NodeDevice(
            gpu.name,
            names.TYPE_VGPU,
            gpu.uuid,
            gpu.minor,
            {"memory": gpu.memory_bytes, "cores": 100},
            pci_bus_id=gpu.pci_bus_id,
        )
    }
    cluster = LocalCluster()
    (node.root / "dra").mkdir(mode=0o700)
    preparer = Preparer(
        PreparerSettings(node.node, node.root / "dra", node.root / "dra-cdi", node.limiter_dir),
        cluster,
        HostLayout.scan(node.config.driver_root, hook_dir=node.limiter_dir),
        None,
        lambda: catalog,
        Checkpoint(node.root / "dra-checkpoint.json", "boot"),
    )
    obj = cluster.put_resource_claim(
        {
            "metadata": {"name": "c", "namespace": "ns"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "driver": names.DRIVER_NAME,
                                "pool": node.node,
                                "request": "main",
                                "device": gpu.name,
                                "shareID": "0b0e0a0d-1111-4222-8333-444455556666",
                                "consumedCapacity": {"memory": f"{memory_mib}Mi", "cores": str(cores)},
                            }
                        ]
                    }
                }
            },
        }
    )
    ref = ClaimRef("ns", "c", obj["metadata"]["uid"])
    preparer.specs.ensure()
    assert preparer.prepare([ref])[ref.uid].error == ""
    spec = preparer.specs.read(ref.uid)
    merged = {k: list(spec["containerEdits"].get(k, [])) for k in ("env", "mounts", "deviceNodes", "hooks")}
    for d in spec["devices"]:
        for k in merged:
            merged[k] += d["containerEdits"].get(k, [])
    return ref.uid, merged


def normalised(edits: dict, uid: str, claim_dir: str) -> dict:
    claims_dir = str(Path(claim_dir).parent)  # in CARVE_LIMITS_SOURCE: where the claims' directories are

    def fix(text: str) -> str:
        text = re.sub(re.escape(claim_dir), "<claim-dir>", text).replace(uid, "<uid>")
        return re.sub(re.escape(claims_dir) + r"\b", "<claims-dir>", text)

    return {
        "env": sorted(fix(e) for e in edits["env"]),
        "mounts": sorted(
            (fix(m["hostPath"]), m["containerPath"].replace(uid, "<uid>")) for m in edits["mounts"]
        ),
        "deviceNodes": sorted((n["path"], n.get("hostPath", n["path"])) for n in edits["deviceNodes"]),
        "hooks": sorted((h["path"], fix(" ".join(h["args"]))) for h in edits["hooks"]),
    }


def test_legacy_container_edits_equal_the_dra_soft_claims():
    node = LegacyNode(gpus=2)
    try:
        node.start_plugin()
        dra_uid, dra = dra_edits(node, 10000, 30)
        pod = gpu_pod(
            "p",
            [("main", {names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: 10000, names.LEGACY_GPUCORES: 30})],
            {names.HAMI_USE_GPUUUID: node.gpus[0].uuid},
        )
        assert node.schedule(pod) == {"Error": ""}
        node.admit(pod)
        started = node.kubelet.start_container("team", "p", "main")
        (cdi,) = node.kubelet.container("team", "p", "main").response.cdi_devices
        legacy_uid = cdi.name.split("=", 1)[1].removesuffix("-0")
        legacy = {
            "env": [f"{k}={v}" for k, v in started.env.items()],
            "mounts": started.mounts,
            "deviceNodes": started.device_nodes,
            "hooks": started.hooks,
        }
        want = normalised(dra, dra_uid, str(node.root / "dra" / "claims" / dra_uid))
        got = normalised(legacy, legacy_uid, str(node.config.state_dir / "allocations" / legacy_uid))
        assert got == want
        assert f"CARVE_MEMORY_LIMIT_0={10000 * MIB}" in got["env"]
        assert any("preload" in args for _path, args in got["hooks"])
    finally:
        node.close()
