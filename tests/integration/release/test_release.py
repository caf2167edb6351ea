"""`make release` (hack/release.sh) without the image (SKIP_IMAGE=1; the image build is `make image`'s, run by
hand): the chart package installs with the image the archive names and no hand-edited tag, the wheel runs
`carve` (the demo: fake GPUs, limiter, CDI) from outside the repository with its native build inside, and the
checksum file verifies (issue 29: nothing to install from)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
HELM = REPO / ".tools" / "helm"
VERSION = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
WHEEL = f"carve-{VERSION}-py3-none-linux_{os.uname().machine}.whl"
# Runs `python -m driver.cli` from the installed wheel only: the checkout's editable install is taken off the
# import path, so a file missing from the wheel is an ImportError here, not silently found in the repository.
RUNNER = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path[:] = [p for p in sys.path if p.rstrip("/") != sys.argv[1]]  # the checkout (not its .venv)
repo, sys.argv = sys.argv[1], ["carve", *sys.argv[2:]]
import driver, driver.resources
assert not driver.__file__.startswith(repo), driver.__file__
runpy.run_module("driver.cli", run_name="__main__")
"""


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    if not HELM.is_file():
        pytest.fail(f"{HELM} is missing: run `make tools`")
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, SKIP_IMAGE="1", DIST=str(out), PY=sys.executable, HELM=str(HELM))
    done = subprocess.run(["hack/release.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"make release: {out} (carve {VERSION})" in done.stdout
    return out


def test_the_checksum_file_covers_every_artifact_and_verifies(dist):
    lines = (dist / f"carve-{VERSION}.sha256").read_text().splitlines()
    listed = {}
    for line in lines:
        digest, name = line.split("  ", 1)
        listed[name] = digest
    assert set(listed) == {f"carve-{VERSION}.tgz", WHEEL}
    for name, digest in listed.items():
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest, name


def test_the_chart_package_needs_no_hand_edited_image(dist):
    chart = dist / f"carve-{VERSION}.tgz"
    with tarfile.open(chart) as t:
        names = set(t.getnames())
        meta = yaml.safe_load(t.extractfile("carve/Chart.yaml").read())
    assert {"carve/values.schema.json", "carve/values.yaml", "carve/templates/daemonset.yaml"} <= names
    assert meta["version"] == VERSION and meta["appVersion"] == VERSION
    done = subprocess.run([str(HELM), "template", "carve", str(chart), "--namespace", "carve-system",
                           "--kube-version", "1.34.0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    images = {c["image"] for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "DaemonSet"
              for c in d["spec"]["template"]["spec"]["containers"]}
    # The name the image archive carries (hack/build_image.sh: localhost/carve:<version>).
    assert images == {f"localhost/carve:{VERSION}"}
    # The packaged schema still refuses what the plugin refuses.
    bad = subprocess.run([str(HELM), "template", "carve", str(chart), "--set", "plugin.splitCount=101"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "splitCount" in bad.stderr


def test_the_wheel_carries_the_native_build_and_runs_without_the_repository(dist, tmp_path):
    wheel = dist / WHEEL
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = z.read(f"carve-{VERSION}.dist-info/entry_points.txt").decode()
    for f in ("libcarve-limiter.so", "carve-cdi-hook", "carve-ldconfig", "fakes/libnvidia-ml.so.1",
              "fakes/libcuda.so.1", "fakes/nvidia-cuda-mps-control"):
        assert f"driver/_native/{f}" in names, f
    assert "driver/_deviceclasses/vgpu.carve.dev.yaml" in names
    assert "carve = driver.cli:main" in entry_points and "kubectl-carve = driver.cli:main" in entry_points
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)]
    subprocess.run(pip, check=True, timeout=300)
    assert os.access(site / "driver/_native/fakes/nvidia-cuda-mps-control", os.X_OK)
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("CARVE_FAKE_LIB_DIR", None)
    done = subprocess.run([sys.executable, "-c", RUNNER, str(REPO), "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "unprepared 3/3 claims" in done.stdout
    # The soft slice got the limiter and the fake GPUs from the wheel, not from the checkout.
    # (the demo prints paths under the installed package as $REPO)
    assert "native/build" not in done.stdout and str(REPO) not in done.stdout
    assert "<- $REPO/driver/_native/libcarve-limiter.so (ro)" in done.stdout, done.stdout
