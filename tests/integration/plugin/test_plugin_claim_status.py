"""After prepare the plugin writes the claim's status.devices (conditions and data); unprepare clears
them. Admin access: no quota, no limiter, no MIG instance, refused outside an admin namespace."""

from __future__ import annotations

import json
import time
import uuid

from support.plugin_harness import NODE, result

from driver import names
from driver.plugin.claims.admin import ADMIN_LABEL

MIG_SOFT = "0=mig,1=soft,exclusive"


def spec_of(node, uid: str) -> dict:
    return json.loads((node.cdi_dir / names.cdi_spec_file_name(uid)).read_text())


def env_of(doc: dict) -> dict:
    edits = [doc.get("containerEdits", {})] + [d["containerEdits"] for d in doc["devices"]]
    return dict(e.split("=", 1) for ed in edits for e in ed.get("env", []))


def _status(node, claim, ours: int | None = None) -> list[dict]:
    """The claim's status.devices once this driver's entries number `ours` (default: after a prepare, at
    least one). Reports leave the plugin from a thread of their own (claims/status.py, StatusQueue): the
    kubelet's answer does not wait for them, so the test waits, a bounded time."""
    ns, name, _ = claim
    deadline = time.monotonic() + 10
    while True:
        devices = node.cluster.get_resource_claim(ns, name).get("status", {}).get("devices") or []
        mine = sum(1 for e in devices if e.get("driver") == names.DRIVER_NAME)
        if (mine >= 1 if ours is None else mine == ours) or time.monotonic() > deadline:
            return devices
        time.sleep(0.02)


def _conditions(entry) -> dict:
    return {c["type"]: (c["status"], c["reason"]) for c in entry["conditions"]}


def test_prepare_writes_status_devices_and_unprepare_clears_them(node, kubelet, plugin_factory):
    plugin_factory(MIG_SOFT)
    mig_dev = node.device("mig", profile="1g.10gb")
    share = str(uuid.uuid4())
    soft = node.put_claim(
        "soft", [result("slice", "gpu-1", share_id=share, consumed={"memory": "4Gi", "cores": "30"})]
    )
    mig = node.put_claim("mig", [result("mig", mig_dev)])
    whole = node.put_claim("t4", [result("gpu", "gpu-2")])
    out = kubelet.prepare([soft, mig, whole])
    assert all(not r["error"] for r in out.values())

    (s,) = _status(node, soft)
    assert (s["driver"], s["pool"], s["device"], s["shareID"]) == (names.DRIVER_NAME, NODE, "gpu-1", share)
    assert _conditions(s) == {"Ready": ("True", "Prepared"), "Enforced": ("True", "Limiter")}
    assert s["data"]["memoryLimitBytes"] == 4 * 1024**3 and s["data"]["coresLimitPercent"] == 30
    assert s["data"]["strategy"] == "vgpu" and s["data"]["gpuUUID"].startswith("GPU-")
    (m,) = _status(node, mig)
    assert _conditions(m)["Enforced"] == ("True", "MigIsolation")
    assert m["data"]["migUUID"] == node.mig_instances()[0]["uuid"]
    assert "memoryLimitBytes" not in m["data"]
    (w,) = _status(node, whole)
    assert _conditions(w)["Enforced"] == ("True", "Exclusive")

    assert kubelet.unprepare([soft, mig, whole]) == {soft[2]: "", mig[2]: "", whole[2]: ""}
    assert _status(node, soft, 0) == _status(node, mig, 0) == _status(node, whole, 0) == []


def test_other_drivers_entries_are_kept(node, kubelet, plugin_factory):
    plugin_factory(MIG_SOFT)
    other = {"driver": "net.example.com", "pool": NODE, "device": "nic-0"}
    claim = node.put_claim(
        "mixed", [result("gpu", "gpu-2"), result("nic", "nic-0", driver="net.example.com")]
    )
    stored = node.cluster.get_resource_claim("default", "mixed")
    stored["status"]["devices"] = [other]
    node.cluster.put_resource_claim(stored)
    assert not kubelet.prepare([claim])[claim[2]]["error"]
    assert [e["driver"] for e in _status(node, claim)] == ["net.example.com", names.DRIVER_NAME]
    kubelet.unprepare([claim])
    assert _status(node, claim, 0) == [other]


def _admin(result_: dict) -> dict:
    return {**result_, "adminAccess": True}


def test_admin_access_is_refused_outside_an_admin_namespace(node, kubelet, plugin_factory):
    plugin_factory(MIG_SOFT)
    node.cluster.put_namespace("debug", {ADMIN_LABEL: "false"})
    claim = node.put_claim("peek", [_admin(result("gpu", "gpu-1"))], namespace="debug")
    err = kubelet.prepare([claim])[claim[2]]["error"]
    assert f'namespace debug has no label {ADMIN_LABEL}="true"' in err and "adminAccess on gpu-1" in err


def test_admin_pod_attaches_without_quota_limiter_or_mig_instance(node, kubelet, plugin_factory):
    plugin_factory(MIG_SOFT)
    node.cluster.put_namespace("debug", {ADMIN_LABEL: "true"})
    share = str(uuid.uuid4())
    tenant = node.put_claim(
        "tenant", [result("slice", "gpu-1", share_id=share, consumed={"memory": "4Gi", "cores": "30"})]
    )
    assert not kubelet.prepare([tenant])[tenant[2]]["error"]
    tenant_limits = (node.plugin_dir / "claims" / tenant[2] / "limits" / "limits").read_bytes()
    mig_dev = node.device("mig", profile="1g.10gb")
    admin = node.put_claim(
        "peek",
        [_admin(result("soft", "gpu-1", share_id=str(uuid.uuid4()))), _admin(result("mig", mig_dev))],
        namespace="debug",
    )
    assert not kubelet.prepare([admin])[admin[2]]["error"]
    env = env_of(spec_of(node, admin[2]))
    assert not any(k.startswith("CARVE_MEMORY_LIMIT") or k == "CARVE_REGION" for k in env)
    assert not (node.plugin_dir / "claims" / admin[2]).exists()
    assert node.mig_instances() == []  # the placement's GPU, no instance of its own
    paths = [
        n["path"] for d in spec_of(node, admin[2])["devices"] for n in d["containerEdits"]["deviceNodes"]
    ]
    assert "/dev/nvidia0" in paths and not any("nvidia-caps" in p for p in paths)
    # The tenant's quota is untouched.
    assert (node.plugin_dir / "claims" / tenant[2] / "limits" / "limits").read_bytes() == tenant_limits
    entries = {e["device"]: e for e in _status(node, admin)}
    assert all(e["data"]["adminAccess"] is True for e in entries.values())
    assert _conditions(entries["gpu-1"])["Enforced"] == ("False", "AdminAccess")
    assert kubelet.unprepare([admin]) == {admin[2]: ""}
    assert (node.plugin_dir / "claims" / tenant[2] / "limits" / "limits").exists()
