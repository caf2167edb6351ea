"""carve's CDI specs against what NVIDIA's container toolkit generator gives for the same driver root.

For every claim kind and every driver layout of tests/support/driverroot.py, carve builds the spec
(driver.plugin.container.edits.claim_edits + driver.cdi.spec.claim_spec) and the test compares it with an
expectation written here by hand from the toolkit's rules (nvidia-container-toolkit pkg/nvcdi/driver-nvml.go,
common-nvml.go, internal/discover/{mounts,ipc,symlinks,ldconfig,hooks}.go, platform-support/dgpu): it does
not call carve's discovery. What the expectation knows of the fixture is only its file list.

Deliberate differences, left out of the comparison and documented in docs/plugin.md:
- the toolkit's `enable-cuda-compat`, `disable-device-node-modification` and `update-application-profile`
  hooks: carve writes no such hooks (no CUDA forward-compat switching, no EGL/Vulkan profiles);
- carve's own additions: env NVIDIA_VISIBLE_DEVICES=void, and for soft slices and slots the limiter mount,
  its region file and limits directory, the `preload` hook and the CARVE_* variables;
- MIG capability nodes carry type/major/minor/mode in carve's spec (the toolkit stats host nodes), and the
  toolkit's DRM nodes (/dev/dri, none in these roots) are not added by carve.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource
from support.driverroot import LAYOUTS, VERSION, build_driver_root, hook_dir, write_proc_root

from driver.cdi.spec import claim_spec
from driver.limits import ClaimLimits, DeviceLimit
from driver.plugin.container.edits import (
    ClaimDevice,
    ClaimFiles,
    HostLayout,
    claim_edits,
    region_container_path,
)

SCHEMA_DIR = Path(__file__).resolve().parent / "cdi-schema"
UID = "5c0ffee0-1111-4222-8333-444455556666"
V = VERSION
LIB_OPTS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
IPC_OPTS = ["nosuid", "nodev", "rbind", "rprivate", "noexec"]
KINDS = ("gpu", "mig", "soft", "slot", "timeslice")
# MIG: GPU instance 3, compute instance 0 on GPU minor 0, with the minors the driver's mig-minors table gives.
MIG = (0, 3, 0)
MIG_CAP_MINORS = (3 + 3 * 9, 3 + 3 * 9 + 1)


def toolkit_expectation(layout_name: str) -> dict:
    """What nvcdi generates for the fixture's driver root, by its rules, as container paths and options."""
    d = "/" + LAYOUTS[layout_name].lib_dir
    libraries = [  # every *.so.<version> in the driver's library dir and its vdpau/, plus nvvm70
        f"{d}/libcuda.so.{V}",
        f"{d}/libcudadebugger.so.{V}",
        f"{d}/libnvidia-gpucomp.so.{V}",
        f"{d}/libnvidia-ml.so.{V}",
        f"{d}/libnvidia-nvvm.so.{V}",
        f"{d}/libnvidia-ptxjitcompiler.so.{V}",
        f"{d}/vdpau/libvdpau_nvidia.so.{V}",
        f"{d}/libnvidia-nvvm70.so.4",
    ]
    firmware = [f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin", f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin"]
    binaries = [f"/usr/bin/{b}" for b in ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                                          "nvidia-cuda-mps-control")]  # fmt: skip
    mounts = {p: LIB_OPTS for p in libraries + firmware + binaries}
    mounts["/run/nvidia-persistenced/socket"] = IPC_OPTS
    links = {
        f"libcuda.so.1::{d}/libcuda.so",  # libcuda.so is always made
        f"libcuda.so.{V}::{d}/libcuda.so.1",  # SONAME links the host has
        f"libcudadebugger.so.{V}::{d}/libcudadebugger.so.1",
        f"libnvidia-ml.so.{V}::{d}/libnvidia-ml.so.1",
        f"libnvidia-ml.so.1::{d}/libnvidia-ml.so",  # .so -> SONAME, because the host has that link
        f"libnvidia-nvvm.so.{V}::{d}/libnvidia-nvvm.so.4",
        f"libnvidia-ptxjitcompiler.so.{V}::{d}/libnvidia-ptxjitcompiler.so.1",
    }
    return {
        "nodes": ["/dev/nvidia-modeset", "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl"],
        "mounts": mounts,
        "links": links,
        "folders": {d, f"{d}/vdpau"},
        "env": {f"NVIDIA_CTK_LIBCUDA_DIR={d}"},
    }


def device_nodes_expected(kind: str) -> list[str]:
    if kind == "mig":
        return ["/dev/nvidia0", *(f"/dev/nvidia-caps/nvidia-cap{m}" for m in MIG_CAP_MINORS)]
    return ["/dev/nvidia0"]


def carve_spec(tmp_path: Path, layout_name: str, kind: str, stub_cache: Path) -> tuple[dict, Path, Path]:
    layout = LAYOUTS[layout_name]
    driver = build_driver_root(tmp_path / "driver", layout, stub_cache)
    gpu, gi, ci = MIG
    proc = write_proc_root(tmp_path / "proc", {(gpu, gi, None): (MIG_CAP_MINORS[0], 292),
                                               (gpu, gi, ci): (MIG_CAP_MINORS[1], 292)})  # fmt: skip
    lib = hook_dir(tmp_path / "lib")
    host = HostLayout.scan(driver, proc, Path(layout.host_driver_root), hook_dir=lib)
    name = f"{UID}-gpu-0" + ("-mig-1g10gb-0" if kind == "mig" else "")
    device = ClaimDevice(name, 0, gi, ci) if kind == "mig" else ClaimDevice(name, 0)
    limits = files = None
    if kind in ("soft", "slot"):
        limits = ClaimLimits((DeviceLimit(4 << 30, 30, "GPU-x"),), region_container_path(UID))
        files = ClaimFiles(tmp_path / "claims" / UID)
    edits = claim_edits(host, [device], limits, files, lib)
    return json.loads(json.dumps(claim_spec(UID, edits.devices, edits.common))), driver, lib


def host_file(driver: Path, host_root: str, host_path: str) -> str:
    """The fixture file a host path names (host paths are under --host-driver-root)."""
    rel = os.path.relpath(host_path, host_root)
    return os.path.realpath(driver / rel)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("kind", KINDS)
def test_spec_matches_the_toolkit_generator(tmp_path, stub_cache, layout, kind):
    spec, driver, lib = carve_spec(tmp_path, layout, kind, stub_cache)
    want = toolkit_expectation(layout)
    host_root = LAYOUTS[layout].host_driver_root
    common = spec["containerEdits"]
    carve_extra_mounts = {
        "/usr/local/carve/lib/libcarve-limiter.so",
        f"/var/run/carve/{UID}/region",
        f"/var/run/carve/{UID}/limits",
    }

    # device nodes: the control nodes in the spec-level edits, the GPU's (and MIG caps) per device
    assert [n["path"] for n in common["deviceNodes"]] == want["nodes"]
    for n in common["deviceNodes"]:
        on_host = host_file(driver, host_root, n.get("hostPath", n["path"]))
        assert on_host == os.path.realpath(driver / n["path"].lstrip("/"))
    (device,) = spec["devices"]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == device_nodes_expected(kind)

    # mounts: same container paths and options; host paths name the same files
    mounts = {m["containerPath"]: m for m in common["mounts"] if m["containerPath"] not in carve_extra_mounts}
    assert {p: m["options"] for p, m in mounts.items()} == want["mounts"]
    for path, m in mounts.items():
        assert m["hostPath"].startswith(host_root)
        assert host_file(driver, host_root, m["hostPath"]) == os.path.realpath(driver / path.lstrip("/"))

    # hooks: the links, then the ld cache update over the library folders (createContainer, in that order)
    hooks = {h["args"][1]: h for h in common["hooks"]}
    order = [h["args"][1] for h in common["hooks"]]
    assert order[:2] == ["create-symlinks", "update-ldcache"]
    hook_path = str(lib / "carve-cdi-hook")
    assert {(h["hookName"], h["path"]) for h in hooks.values()} == {("createContainer", hook_path)}
    link_args = hooks["create-symlinks"]["args"][2:]
    assert set(link_args[1::2]) == want["links"] and set(link_args[0::2]) == {"--link"}
    ld_args = hooks["update-ldcache"]["args"][2:]
    assert ld_args[:2] == ["--ldconfig", str(lib / "carve-ldconfig")]
    assert set(ld_args[3::2]) == want["folders"]

    # env: the toolkit's, plus carve's own
    env = set(common["env"])
    assert want["env"] <= env
    extra = {e.split("=")[0] for e in env - want["env"]}
    limiter = kind in ("soft", "slot")
    assert ("preload" in hooks) == limiter and ("CARVE_REGION" in extra) == limiter
    carve_own = {"NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"} | {e for e in extra if e.startswith("CARVE_")}
    assert extra <= carve_own


def test_mig_capability_nodes_need_no_host_file(tmp_path, stub_cache):
    spec, _, _ = carve_spec(tmp_path, "rhel", "mig", stub_cache)
    caps = spec["devices"][0]["containerEdits"]["deviceNodes"][1:]
    assert caps == [
        {"path": f"/dev/nvidia-caps/nvidia-cap{m}", "type": "c", "major": 237, "minor": m, "fileMode": 292,
         "permissions": "rw"}
        for m in MIG_CAP_MINORS
    ]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_specs_validate_against_the_cdi_schema(tmp_path, stub_cache, kind):
    spec, _, _ = carve_spec(tmp_path, "gpu-operator", kind, stub_cache)
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = Registry().with_resource("defs.json", Resource.opaque(defs))
    jsonschema.Draft7Validator(schema, registry=registry).validate(spec)
    # Hooks and fully specified nodes exist since CDI 0.3.0; the digit-first device names need 0.5.0.
    assert spec["cdiVersion"] == "0.5.0"
