"""The plugin process under a fake kubelet: registration, v1 and v1beta1 prepare/unprepare, every kind."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource
from support.plugin_harness import NODE, result, slice_config

from driver import names
from driver.limits import read_limits
from driver.limits.mounts import limits_source

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "unit" / "cdi" / "cdi-schema"

MIG_SOFT = "0=mig,1=soft,exclusive"
SLOTS_TS = "0=slots,1=timeslice,exclusive"


def validate_cdi(doc: dict) -> None:
    """Structure per the CDI project's JSON schema (draft-07; defs.json resolved locally)."""
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = Registry().with_resource("defs.json", Resource.opaque(defs))
    jsonschema.Draft7Validator(schema, registry=registry).validate(doc)


def spec_of(node, uid: str) -> dict:
    return json.loads((node.cdi_dir / names.cdi_spec_file_name(uid)).read_text())


def env_of(doc: dict) -> dict:
    out = {}
    for edits in [doc.get("containerEdits", {})] + [d["containerEdits"] for d in doc["devices"]]:
        for e in edits.get("env", []):
            k, _, v = e.partition("=")
            out[k] = v
    return out


def test_registration_reports_both_dra_versions(node, kubelet, plugin_factory):
    plugin = plugin_factory()
    info = kubelet.get_info()
    assert info.type == "DRAPlugin"
    assert info.name == names.DRIVER_NAME
    assert info.endpoint == str(node.plugin_dir / names.DRA_SOCKET)
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    kubelet.notify(False, "driver name clash")
    kubelet.notify(True)
    assert "event=registration.refused" in plugin.log() and "driver name clash" in plugin.log()
    assert "event=registration.accepted" in plugin.log()


def test_sockets_are_private(node, plugin_factory):
    plugin_factory()
    for sock in (node.plugin_dir / names.DRA_SOCKET, node.registry_dir / names.REGISTRATION_SOCKET):
        mode = os.stat(sock).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(node.plugin_dir).st_mode) == 0o700


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_and_unprepare_mig_soft_and_whole_gpu(node, kubelet, plugin_factory, version):
    plugin_factory(MIG_SOFT)
    mig_dev = node.device("mig", profile="1g.10gb")
    share = str(uuid.uuid4())
    soft = node.put_claim(
        "soft",
        [result("slice", "gpu-1", share_id=share, consumed={"memory": "4Gi", "cores": "30"})],
        [slice_config(corePolicy="force", priority="low")],
    )
    mig = node.put_claim("mig", [result("mig", mig_dev)])
    whole = node.put_claim("t4", [result("gpu", "gpu-2")])

    out = kubelet.prepare([soft, mig, whole], version)
    assert {u: r["error"] for u, r in out.items()} == {soft[2]: "", mig[2]: "", whole[2]: ""}
    ((req, pool, dev, ids, got_share),) = out[soft[2]]["devices"]
    assert (req, pool, dev) == (["slice"], NODE, "gpu-1")
    assert ids == [f"{names.CDI_KIND}={soft[2]}-gpu-1-{share}"]
    assert got_share == (share if version == "v1" else None)
    assert out[mig[2]]["devices"][0][3] == [f"{names.CDI_KIND}={mig[2]}-{mig_dev}"]

    soft_spec = spec_of(node, soft[2])
    for uid in (soft[2], mig[2], whole[2]):
        validate_cdi(spec_of(node, uid))
    env = env_of(soft_spec)
    assert env["CARVE_MEMORY_LIMIT_0"] == str(4 * 1024**3)
    assert env["CARVE_CORES_LIMIT_0"] == "30"
    assert env["CARVE_CORE_POLICY"] == "force" and env["CARVE_PRIORITY"] == "low"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    mounts = {m["containerPath"]: m for m in soft_spec["containerEdits"]["mounts"]}
    assert mounts[names.LIMITER_CONTAINER_PATH]["hostPath"] == str(node.limiter_dir / names.LIMITER_LIBRARY)
    assert "ro" in mounts[names.LIMITER_CONTAINER_PATH]["options"]
    # The image's /etc/ld.so.preload is not mounted over: a createContainer hook merges the limiter in.
    assert "/etc/ld.so.preload" not in mounts
    hooks = [h["args"] for h in soft_spec["containerEdits"]["hooks"]]
    assert [names.HOOK_BINARY, "preload", "--library", names.LIMITER_CONTAINER_PATH] in hooks
    assert [a[1] for a in hooks] == ["create-symlinks", "update-ldcache", "preload"]
    assert env["CARVE_REGION"] == f"/var/run/carve/{soft[2]}/region"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    region = mounts[f"/var/run/carve/{soft[2]}/region"]
    assert Path(region["hostPath"]).stat().st_size > 0 and "rw" in region["options"]
    limits = mounts[f"/var/run/carve/{soft[2]}/limits"]  # the plugin's limits, read-only to the container
    assert "ro" in limits["options"] and read_limits(Path(limits["hostPath"]) / "limits").memory_limits == (
        4 * 1024**3,
    )
    # The limiter's trust anchor (driver/limits/mounts.py): the device and root of the filesystem holding
    # the claims directory, as this host's mountinfo says, for every claim (the plugin remembers it).
    assert env["CARVE_LIMITS_SOURCE"] == limits_source(Path(limits["hostPath"]).parents[1])
    assert "/usr/lib64/libcuda.so.580.95.05" in mounts and "/usr/bin/nvidia-smi" in mounts
    nodes = [n["path"] for n in soft_spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia1"]
    common_nodes = {n["path"] for n in soft_spec["containerEdits"]["deviceNodes"]}
    assert common_nodes == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}  # noqa: E501
    # MIG: the GPU's node and the instance's capability nodes, fully specified from the fake NVML's files.
    mig_nodes = spec_of(node, mig[2])["devices"][0]["containerEdits"]["deviceNodes"]
    assert mig_nodes[0]["path"] == "/dev/nvidia0"
    caps = mig_nodes[1:]
    assert [(n["type"], n["major"], n["fileMode"]) for n in caps] == [("c", 237, 0o444)] * 2
    assert [n["path"] for n in caps] == [f"/dev/nvidia-caps/nvidia-cap{n['minor']}" for n in caps]
    # Whole GPU and MIG claims carry no limiter.
    assert "CARVE_REGION" not in env_of(spec_of(node, whole[2]))
    assert len(node.mig_instances()) == 1

    assert kubelet.unprepare([soft, mig, whole], version) == {soft[2]: "", mig[2]: "", whole[2]: ""}
    assert node.leftovers() == {"specs": [], "claim_dirs": [], "checkpoint": {}}
    assert node.mig_instances() == []


def test_repeated_prepare_returns_the_same_ids(node, kubelet, plugin_factory):
    plugin_factory(MIG_SOFT)
    claim = node.put_claim("c", [result("mig", node.device("mig", profile="1g.10gb"))])
    first = kubelet.prepare([claim])
    assert first[claim[2]]["error"] == ""
    assert kubelet.prepare([claim]) == first
    assert len(node.mig_instances()) == 1
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    assert kubelet.unprepare([claim]) == {claim[2]: ""}  # idempotent
    assert node.mig_instances() == []


def test_slots_on_one_gpu_add_up_and_timeslice_has_no_limits(node, kubelet, plugin_factory):
    plugin_factory(SLOTS_TS)
    slots = node.put_claim(
        "slots", [result("s", "gpu-0-slot-0"), result("s", "gpu-0-slot-3"), result("s", "gpu-0-slot-7")]
    )
    ts = node.put_claim("ts", [result("t", "gpu-1", share_id=str(uuid.uuid4()))])
    out = kubelet.prepare([slots, ts])
    assert out[slots[2]]["error"] == "" and out[ts[2]]["error"] == ""
    env = env_of(spec_of(node, slots[2]))
    shareable = 80 * 1024**3 - 10 * 512 * 1024**2  # less one CUDA context reserve per slot
    assert env["CARVE_MEMORY_LIMIT_0"] == str(3 * (shareable // 10))
    assert env["CARVE_CORES_LIMIT_0"] == "30"
    assert "CARVE_MEMORY_LIMIT_1" not in env
    assert "CARVE_REGION" not in env_of(spec_of(node, ts[2]))
    assert len(out[slots[2]]["devices"]) == 3
    assert kubelet.unprepare([slots, ts]) == {slots[2]: "", ts[2]: ""}
    assert node.leftovers() == {"specs": [], "claim_dirs": [], "checkpoint": {}}


def test_unknown_claim_unprepare_is_a_no_op(node, kubelet, plugin_factory):
    plugin_factory()
    ghost = ("default", "ghost", str(uuid.uuid4()))
    assert kubelet.unprepare([ghost]) == {ghost[2]: ""}


def test_bad_claims_fail_alone(node, kubelet, plugin_factory):
    plugin_factory(MIG_SOFT)
    good = node.put_claim("good", [result("gpu", "gpu-2")])
    typo = node.put_claim(
        "typo",
        [result("s", "gpu-1", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi"})],
        [slice_config(corepolicy="force")],
    )
    wrong_kind = node.put_claim("kind", [result("gpu", "gpu-2")], [slice_config()])
    mismatch = node.put_claim("moved", [result("gpu", "gpu-2")])
    not_allocated = ("default", "pending", str(uuid.uuid4()))
    node.cluster.put_resource_claim(
        {
            "metadata": {"name": "pending", "namespace": "default", "uid": not_allocated[2]},
            "spec": {},
            "status": {},
        }
    )
    elsewhere = node.put_claim("elsewhere", [result("gpu", "gpu-2", pool="node-b")])
    stale = ("default", "moved", str(uuid.uuid4()))  # same name, another UID

    out = kubelet.prepare([good, typo, wrong_kind, stale, not_allocated, elsewhere])
    assert set(out) == {good[2], typo[2], wrong_kind[2], stale[2], not_allocated[2], elsewhere[2]}
    assert out[good[2]]["error"] == "" and out[good[2]]["devices"]
    assert "default/typo" in out[typo[2]]["error"] and "corepolicy" in out[typo[2]]["error"]
    assert "unknown field" in out[typo[2]]["error"] and "gpu-1" in out[typo[2]]["error"]
    assert "SliceConfig" in out[wrong_kind[2]]["error"] and "gpu" in out[wrong_kind[2]]["error"]
    assert "metadata.uid" in out[stale[2]]["error"] and stale[2] in out[stale[2]]["error"]
    assert mismatch[2] in out[stale[2]]["error"]
    assert "not allocated" in out[not_allocated[2]]["error"]
    assert "node-b" in out[elsewhere[2]]["error"] and "pool" in out[elsewhere[2]]["error"]
    assert node.spec_files() == [names.cdi_spec_file_name(good[2])]
    assert list(node.checkpoint_claims()) == [good[2]]


def test_health_endpoint_follows_registration(node, kubelet, plugin_factory):
    import urllib.error
    import urllib.request

    plugin = plugin_factory(extra=("--healthz-addr", "127.0.0.1:0"))
    port = plugin.wait_for_log(r"healthz=127\.0\.0\.1:(\d+)").group(1)
    url = f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as r:
        assert r.status == 200 and r.read() == b"ok\n"
    kubelet.notify(False, "socket path mismatch")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{url}/healthz", timeout=10)
    assert e.value.code == 503 and b"socket path mismatch" in e.value.read()
    with urllib.request.urlopen(f"{url}/status", timeout=10) as r:
        status = json.loads(r.read())
    assert status["registration"]["status"] == "refused"


def test_file_lock_keeps_a_second_process_from_preparing(node, kubelet, plugin_factory):
    import fcntl
    import threading

    plugin_factory()
    claim = node.put_claim("c", [result("gpu", "gpu-2")])
    fd = os.open(node.plugin_dir / "plugin.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another plugin process in the middle of a prepare would
    outcome: dict = {}
    t = threading.Thread(target=lambda: outcome.update(kubelet.prepare([claim])))
    t.start()
    t.join(1.0)
    assert t.is_alive() and node.spec_files() == []  # waiting for the lock
    os.close(fd)
    t.join(10)
    assert outcome[claim[2]]["error"] == "" and len(node.spec_files()) == 1
