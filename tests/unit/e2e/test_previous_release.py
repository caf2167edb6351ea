"""The previous release for e2e/test_upgrade_previous.py (e2e/cluster/previous.py) and the values the
launcher gives an older chart: a chart that predates a value is not handed it (its schema refuses
unknown keys), the release is built once per commit, and a ref this clone lacks is a clear error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.cluster import previous
from e2e.cluster.chart import values_for_chart
from e2e.cluster.images import ImageError
from e2e.cluster.versions import REPO

VALUES = {
    "image": {"repository": "localhost/carve", "tag": "0.1.0", "pullPolicy": "Never"},
    "controller": {"enabled": False},
    "plugin": {
        "pluginDir": "/n/plugins/gpu.carve.dev",
        "runDir": "/n/run",
        "nodeSelector": {"kubernetes.io/hostname": "e2e-u1"},
        "extraEnv": [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"}],
    },
}


def old_chart(tmp_path: Path) -> Path:
    """A chart whose plugin values predate runDir (as 6eae394's)."""
    chart = tmp_path / "carve"
    chart.mkdir()
    known = {
        "image": {"repository": "carve", "tag": "dev", "pullPolicy": "IfNotPresent"},
        "controller": {"enabled": True},
        "plugin": {"pluginDir": "/var/lib/kubelet/plugins/gpu.carve.dev", "nodeSelector": {}, "extraEnv": []},
    }
    (chart / "values.yaml").write_text(yaml.safe_dump(known))
    return chart


def test_an_older_chart_is_not_given_a_value_it_does_not_know(tmp_path: Path):
    fitted = values_for_chart(VALUES, old_chart(tmp_path))
    assert "runDir" not in fitted["plugin"]
    # what it knows is kept, the keys of a map it leaves empty too
    assert fitted["plugin"]["nodeSelector"] == {"kubernetes.io/hostname": "e2e-u1"}
    assert fitted["plugin"]["pluginDir"] == VALUES["plugin"]["pluginDir"]
    assert fitted["image"] == VALUES["image"] and fitted["controller"] == {"enabled": False}


def test_this_trees_chart_is_given_every_value():
    assert values_for_chart(VALUES, REPO / "helm" / "carve") == VALUES


def test_whether_a_chart_knows_the_run_directory(tmp_path: Path):
    assert "runDir" in previous.chart_plugin_values(REPO / "helm" / "carve")
    assert "runDir" not in previous.chart_plugin_values(old_chart(tmp_path))


def test_a_ref_this_clone_lacks_is_a_clear_error():
    with pytest.raises(ImageError, match=rf"{previous.ENV_REF}='no-such-ref-x1'.*git fetch --unshallow"):
        previous.resolve("no-such-ref-x1")


def test_the_release_is_built_once_per_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(previous, "CACHE", tmp_path / "previous")
    builds = []

    def fake_build(commit: str, tag: str, out: Path) -> None:
        builds.append((commit, tag))
        out.write_bytes(b"oci")

    monkeypatch.setattr(previous, "_build_image", fake_build)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    head = head.stdout.strip()
    first = previous.build("HEAD")
    second = previous.build(head)
    assert len(builds) == 1 and builds[0][0] == head and builds[0][1].endswith(previous.TAG_SUFFIX)
    assert first.image == second.image and first.image.name.startswith("localhost/carve:")
    assert first.image.name.endswith(previous.TAG_SUFFIX) and first.image.tarball.read_bytes() == b"oci"
    assert (first.chart / "Chart.yaml").exists() and first.knows_run_dir
