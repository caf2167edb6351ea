"""hack/frameworks_env.py: where the framework environment lives and when it is (re)built. No pip here:
the build step is replaced by one that records its calls."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("frameworks_env", REPO / "hack" / "frameworks_env.py")
frameworks_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(frameworks_env)


@pytest.fixture
def pins(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CARVE_FRAMEWORKS_ENV", raising=False)
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.15.0\n")
    return req


def test_env_lives_in_the_user_cache_keyed_by_the_pins(pins, tmp_path):
    first = frameworks_env.env_dir(pins)
    assert first.parent == tmp_path / "cache" / "carve" and first.name.startswith("frameworks-")
    assert frameworks_env.env_dir(pins) == first  # a second clone with the same pins shares it
    pins.write_text("torch==2.16.0\n")
    assert frameworks_env.env_dir(pins) != first  # a changed pin builds a new one


def test_env_place_can_be_named(pins, tmp_path, monkeypatch):
    monkeypatch.setenv("CARVE_FRAMEWORKS_ENV", str(tmp_path / "mine"))
    assert frameworks_env.env_dir(pins) == tmp_path / "mine"


def test_a_complete_env_is_reused_and_a_cut_short_one_rebuilt(pins, monkeypatch):
    builds = []

    def fake_build(target: Path, requirements: Path) -> None:
        builds.append(target)
        target.mkdir(parents=True, exist_ok=True)
        if len(builds) > 1:  # the first build is cut short: no stamp
            (target / frameworks_env.STAMP).write_text("done")

    monkeypatch.setattr(frameworks_env, "build", fake_build)
    target = frameworks_env.env_dir(pins)
    python = frameworks_env.ensure(pins)
    assert python == target / "bin" / "python" and len(builds) == 1
    frameworks_env.ensure(pins)  # no stamp: built again
    assert len(builds) == 2
    frameworks_env.ensure(pins)  # stamp written last: reused
    assert len(builds) == 2


def test_a_failed_install_names_the_step(pins, monkeypatch, capsys):
    def failing(*cmd, **kw):
        class Done:
            returncode, stdout = 1, "ERROR: No matching distribution found for torch==2.15.0"

        return Done()

    monkeypatch.setattr(frameworks_env.subprocess, "run", failing)
    with pytest.raises(frameworks_env.EnvError) as failed:
        frameworks_env.build(frameworks_env.env_dir(pins), pins)
    assert "creating the venv failed" in str(failed.value) and "No matching distribution" in str(failed.value)
