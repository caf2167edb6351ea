"""Per driver layout: a spec's container view has libcuda.so.1 and libcuda.so found by a loader search.

The spec is built by carve (claim_edits, claim_spec) from a fake driver root (tests/support/driverroot.py);
the container is a minimal Debian-like image (the host's loader and libc) in a throwaway mount namespace
where the spec's mounts are bind-mounted and its hooks run (tests/support/cdi_sandbox.py); then
dlopen_probe and cuda_probe run in it. The RHEL layout's /usr/lib64 is not in a Debian loader's default
search path, so there only the ld cache the hook wrote makes libcuda.so.1 loadable.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cdi_sandbox import image_root, run_in_spec, sandbox_available
from support.driverroot import FAKES, LAYOUTS, VERSION, build_driver_root, hook_dir

from driver.cdi.spec import claim_spec
from driver.plugin.container.edits import ClaimDevice, HostLayout, claim_edits
from driver.plugin.container.libfiles import read_ld_cache

REPO = Path(__file__).resolve().parents[3]
PROBES = REPO / "native/build/tests"
UID = "0b7f6d2e-9a41-4c1e-8f3a-2d5c7e9b1a60"


@pytest.fixture(scope="module")
def sandbox():
    reason = sandbox_available()
    if reason:
        pytest.skip(f"needs mount namespaces and chroot: {reason}")
    for probe in ("dlopen_probe", "cuda_probe"):
        if not (PROBES / probe).exists():
            pytest.fail(f"{PROBES / probe} missing: run `make native`")


def spec_for(tmp_path: Path, layout_name: str, stub_cache: Path) -> tuple[dict, Path]:
    layout = LAYOUTS[layout_name]
    # The plugin reads the driver where it sees it; host paths are where the host (here: the same) has it.
    driver = build_driver_root(tmp_path / "driver", layout, stub_cache)
    host = HostLayout.scan(driver, tmp_path / "proc", hook_dir=hook_dir(tmp_path / "lib"))
    edits = claim_edits(host, [ClaimDevice(f"{UID}-gpu-0", 0)])
    return claim_spec(UID, edits.devices, edits.common), driver


def image(tmp_path: Path) -> Path:
    probes = {f"/usr/local/bin/{p}": PROBES / p for p in ("dlopen_probe", "cuda_probe")}
    return image_root(tmp_path / "rootfs", probes, extra_libs=(FAKES / "libcuda.so.1",))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_libcuda_is_found_by_a_loader_search_in_the_container(sandbox, tmp_path, stub_cache, layout):
    spec, _ = spec_for(tmp_path, layout, stub_cache)
    rootfs = image(tmp_path)
    lib_dir = "/" + LAYOUTS[layout].lib_dir
    found = {}
    for name in ("libcuda.so.1", "libcuda.so"):  # one process each: a loaded SONAME would answer both
        done = run_in_spec(spec, rootfs, ["/usr/local/bin/dlopen_probe", name])
        assert done.returncode == 0, done.stdout + done.stderr
        found.update(line.split(" ", 1) for line in done.stdout.splitlines())
    assert found == {"libcuda.so.1": f"{lib_dir}/libcuda.so.1", "libcuda.so": f"{lib_dir}/libcuda.so"}
    # `ldconfig -p` (Triton's way of finding libcuda.so) lists both.
    cache = dict(read_ld_cache(rootfs / "etc/ld.so.cache"))
    assert cache["libcuda.so.1"] == f"{lib_dir}/libcuda.so.1"
    assert cache["libcuda.so"] == f"{lib_dir}/libcuda.so"
    assert (rootfs / lib_dir.lstrip("/") / "libcuda.so").readlink() == Path("libcuda.so.1")
    assert (rootfs / lib_dir.lstrip("/") / "libcuda.so.1").readlink() == Path(f"libcuda.so.{VERSION}")


def test_without_the_hooks_the_rhel_layout_is_not_found(sandbox, tmp_path, stub_cache):
    spec, _ = spec_for(tmp_path, "rhel", stub_cache)
    spec["containerEdits"]["hooks"] = []
    done = run_in_spec(spec, image(tmp_path), ["/usr/local/bin/dlopen_probe", "libcuda.so.1"])
    assert done.returncode == 1 and "libcuda.so.1 ERROR" in done.stdout


def test_a_cuda_program_runs_in_the_container(sandbox, tmp_path, stub_cache):
    spec, _ = spec_for(tmp_path, "rhel", stub_cache)
    env = {"CARVE_FAKE_GPUS": "1xA100-80GB", "CARVE_FAKE_SEED": "sandbox"}
    done = run_in_spec(spec, image(tmp_path), ["/usr/local/bin/cuda_probe"], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == {"ok": True, "devices": 1, "name": "NVIDIA A100-SXM4-80GB"}
