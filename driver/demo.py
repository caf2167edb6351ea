"""`carve demo`: the whole node-side path on fake GPUs, in temp dirs, without root.

A fake node (2x A100-80GB, 1x T4) publishes its ResourceSlices; three claims (a 4Gi/30% soft slice, a
1g.10gb MIG instance, the whole T4) are allocated by carve's allocator the way the scheduler would; a
fake kubelet prepares them over the plugin's real unix sockets; the CDI devices, env and mounts are
printed; everything is unprepared and shown to be gone.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import grpc

from api.grpc import dra_v1_pb2, dra_v1_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc
from driver import names
from driver.resources import deviceclasses_dir, native_dir

GPUS = "fake:2xA100-80GB,1xT4"
NODE = "demo-node"
FAKE_DRIVER_VERSION = "580.95.05"  # what the fake NVML reports by default
STRATEGY = "0=mig,1=soft,2=exclusive"
REPO = Path(__file__).resolve().parents[1]

CLAIMS = [
    (
        "soft-4gi-30pct",
        "a 4Gi / 30% soft slice of an A100",
        {"deviceClassName": names.CLASS_VGPU, "capacity": {"requests": {"memory": "4Gi", "cores": "30"}}},
    ),
    (
        "mig-1g10gb",
        "a 1g.10gb MIG instance",
        {
            "deviceClassName": names.CLASS_MIG,
            "selectors": [{"cel": {"expression": 'device.attributes["gpu.carve.dev"].profile == "1g.10gb"'}}],
        },
    ),
    (
        "whole-t4",
        "the whole T4",
        {
            "deviceClassName": names.CLASS_GPU,
            "selectors": [
                {"cel": {"expression": 'device.attributes["gpu.carve.dev"].productName.contains("T4")'}}
            ],
        },
    ),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--keep",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep the temp dir (prints its path)",
    )
    p.add_argument(
        "--verbose",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="show the plugin's own log lines",
    )


def _device_classes() -> list[dict]:
    import yaml

    return [yaml.safe_load((deviceclasses_dir() / f"{c}.yaml").read_text()) for c in names.DEVICE_CLASSES]


def _fake_driver_root(root: Path) -> Path:
    """Driver files and device nodes as a RHEL host has them; the nodes are placeholders (no root needed)."""
    (root / "dev").mkdir(parents=True)
    for n in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (root / "dev" / n).touch()
    lib = root / "usr/lib64"
    lib.mkdir(parents=True)
    for so in ("libcuda.so", "libnvidia-ml.so"):
        built = native_dir() / "fakes" / f"{so}.1"
        if built.exists():
            # A copy, not a link: a link out of the driver root would point nowhere on a real host.
            shutil.copy2(built, lib / f"{so}.{FAKE_DRIVER_VERSION}")
            os.symlink(f"{so}.{FAKE_DRIVER_VERSION}", lib / f"{so}.1")
    return root


def _limiter_dir(tmp: Path) -> Path:
    built = native_dir() / names.LIMITER_LIBRARY
    if built.exists():
        return built.parent
    placeholder = tmp / "limiter"
    placeholder.mkdir()
    for name in (names.LIMITER_LIBRARY, names.HOOK_BINARY, names.LDCONFIG_BINARY):
        (placeholder / name).write_bytes(b"")  # `make native` builds the real ones
    return placeholder


def _allocate(cluster, claims: list[dict]) -> list[dict]:
    from driver.allocator import allocate

    slices = cluster.list_resource_slices(names.DRIVER_NAME)
    classes = _device_classes()
    done: list[dict] = []
    for claim in claims:
        claim["status"] = {"allocation": allocate(claim, slices, classes, done, NODE)}
        done.append(cluster.put_resource_claim(claim))
    return done


def _print_spec(doc: dict, tmp: Path) -> None:
    short = lambda p: p.replace(str(tmp), "$TMP").replace(str(REPO), "$REPO")  # noqa: E731
    edits = [doc.get("containerEdits", {})] + [d["containerEdits"] for d in doc["devices"]]
    env = sorted(e for ed in edits for e in ed.get("env", []))
    nodes = [n["path"] for ed in edits for n in ed.get("deviceNodes", [])]
    print(f"    cdiVersion {doc['cdiVersion']}; device nodes: {' '.join(nodes) or '-'}")
    for e in env:
        print(f"    env    {e}")
    for ed in edits:
        for m in ed.get("mounts", []):
            ro = "ro" if "ro" in m.get("options", []) else "rw"
            print(f"    mount  {m['containerPath']} <- {short(m['hostPath'])} ({ro})")
    for ed in edits:
        for h in ed.get("hooks", []):
            what = [a for a in h["args"][2:] if not a.startswith("--") and "/carve-ldconfig" not in a]
            print(f"    hook   {h['args'][1]} {' '.join(short(a) for a in what)}")


def run(args: argparse.Namespace) -> int:
    from driver.plugin.logfmt import setup

    setup("info" if args.verbose else "error")
    tmp = Path(tempfile.mkdtemp(prefix="carve-demo-"))
    plugin_dir = tmp / "plugin"
    plugin_dir.mkdir(mode=0o700)
    os.environ[names.ENV_FAKE_STATE] = str(plugin_dir / "fake-gpus.state")
    os.environ[names.ENV_FAKE_PROC_ROOT] = str(plugin_dir / "fake-proc")  # MIG capability files
    os.environ.setdefault("CARVE_FAKE_DRIVER_VERSION", FAKE_DRIVER_VERSION)

    from driver.cluster import LocalCluster
    from driver.gpu import discover
    from driver.plugin.mig.ops import NvmlMig
    from driver.plugin.server import Plugin, PluginConfig

    gpus = discover(GPUS, NODE)  # the plugin turns MIG mode on for the mig GPUs (driver/plugin/mig/modes.py)
    cluster = LocalCluster(version=(1, 36))
    config = PluginConfig(
        node_name=NODE,
        plugin_dir=plugin_dir,
        registry_dir=tmp / "registry",
        cdi_dir=tmp / "cdi",
        driver_root=_fake_driver_root(tmp / "driver-root"),
        limiter_dir=_limiter_dir(tmp),
        mig_proc_root=plugin_dir / "fake-proc",
        driver_required=False,  # as `carve plugin --gpus fake:...`
        strategy=STRATEGY,
        k8s_version="1.36",
        publish_interval_s=3600,
        boot_id="demo",
    )
    mig = NvmlMig()
    plugin = Plugin(config, cluster, gpus, mig, mig)
    plugin.start()
    try:
        print(f"node {NODE}: {', '.join(f'{g.name} {g.product}' for g in gpus)}  (fake GPUs; temp dir {tmp})")
        slices = cluster.list_resource_slices(names.DRIVER_NAME, NODE)
        kinds: dict[str, int] = {}
        for d in (d for s in slices for d in s["spec"].get("devices") or []):
            t = d["attributes"]["type"]["string"]
            kinds[t] = kinds.get(t, 0) + 1
        print(
            f"published {len(slices)} ResourceSlices, strategies {STRATEGY}: "
            + ", ".join(f"{n} {t}" for t, n in sorted(kinds.items()))
        )

        with grpc.insecure_channel(f"unix://{plugin.reg_socket}") as ch:
            reg = pluginregistration_pb2_grpc.RegistrationStub(ch)
            info = reg.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=10)
            reg.NotifyRegistrationStatus(
                pluginregistration_pb2.RegistrationStatus(plugin_registered=True), timeout=10
            )
        print(
            f"kubelet: registered {info.name} ({', '.join(info.supported_versions)}) "
            f"at {Path(info.endpoint).name}"
        )

        claims = [
            {
                "metadata": {"name": name, "namespace": "demo"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
            }
            for name, _, exactly in CLAIMS
        ]
        stored = _allocate(cluster, claims)
        refs = [
            dra_v1_pb2.Claim(namespace="demo", name=c["metadata"]["name"], uid=c["metadata"]["uid"])
            for c in stored
        ]
        with grpc.insecure_channel(f"unix://{plugin.dra_socket}") as ch:
            stub = dra_v1_pb2_grpc.DRAPluginStub(ch)
            prepared = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=refs), timeout=30
            )
            for (name, what, _), ref in zip(CLAIMS, refs, strict=True):
                entry = prepared.claims[ref.uid]
                if entry.error:
                    print(f"\nclaim demo/{name}: ERROR {entry.error}")
                    continue
                devs = ", ".join(d.device_name for d in entry.devices)
                print(f"\nclaim demo/{name} ({what}) -> {devs}")
                for d in entry.devices:
                    for cdi_id in d.cdi_device_ids:
                        print(f"    CDI    {cdi_id}")
                for rec in plugin.preparer.state[ref.uid].devices:
                    if rec.mig:
                        print(f"    MIG    {rec.mig.uuid} (GPU instance {rec.mig.gpu_instance_id})")
                _print_spec(json.loads(plugin.preparer.specs.path(ref.uid).read_text()), tmp)
            failed = [r.uid for r in refs if prepared.claims[r.uid].error]
            mig_live = [m.uuid for g in discover(GPUS, NODE) for m in g.mig_instances]
            print(
                f"\nMIG instances live: {len(mig_live)}; CDI specs: {len(plugin.preparer.specs.claim_uids())}"
            )
            unprepared = stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=refs), timeout=30
            )
        errors = [e.error for e in unprepared.claims.values() if e.error]
        mig_live = [m.uuid for g in discover(GPUS, NODE) for m in g.mig_instances]
        print(
            f"unprepared {len(refs) - len(errors)}/{len(refs)} claims; MIG instances live: {len(mig_live)}; "
            f"CDI specs: {len(plugin.preparer.specs.claim_uids())}; "
            f"checkpoint claims: {len(plugin.preparer.state)}"
        )
        return 1 if failed or errors else 0
    finally:
        plugin.stop()
        logging.getLogger("driver").setLevel(logging.ERROR)
        if args.keep:
            print(f"kept {tmp}")
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
