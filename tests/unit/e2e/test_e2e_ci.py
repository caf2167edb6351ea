"""CI's e2e step (hack/ci_e2e.py) never falls back to a lesser e2e: a build that fails or overruns its budget
fails CI with a banner; the only way not to run it is the explicit CARVE_CI_E2E=0."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def load_ci():
    spec = importlib.util.spec_from_file_location("ci_e2e", REPO / "hack" / "ci_e2e.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeBuild:
    """Stands in for subprocess.Popen of the builds: exits with `rc`, or never ends (`hangs`)."""

    def __init__(self, rc: int = 0, hangs: bool = False):
        self.rc, self.hangs, self.pid = rc, hangs, 4242

    def wait(self, timeout=None):
        if self.hangs and timeout is not None:
            raise subprocess.TimeoutExpired("make", timeout)
        return self.rc


@pytest.fixture
def ci(monkeypatch, tmp_path):
    """The module with root, Go, a missing cluster binary, and every command recorded instead of run."""
    module = load_ci()
    runs: list[list[str]] = []
    outcomes: dict[str, FakeBuild] = {}

    def popen(argv, **kwargs):
        runs.append(argv)
        return outcomes.get(argv[1], FakeBuild())

    def call(argv, **kwargs):
        runs.append(argv)
        return 0

    monkeypatch.setattr(module.subprocess, "Popen", popen)
    monkeypatch.setattr(module.subprocess, "call", call)
    monkeypatch.setattr(module.os, "geteuid", lambda: 0)
    monkeypatch.setattr(module.os, "killpg", lambda pid, sig: runs.append(["killpg", str(pid)]))
    monkeypatch.setattr(module.shutil, "which", lambda name: "/usr/bin/go")
    monkeypatch.setattr(type(module.resolve("1.37")), "binary", property(lambda self: tmp_path / "k8s"))
    for var in ("CARVE_CI_E2E", "CARVE_CI_E2E_K8S", "CARVE_CI_SOAK_MINUTES", "CARVE_CI_SOAK_SEED"):
        monkeypatch.delenv(var, raising=False)
    module.runs, module.outcomes = runs, outcomes
    return module


SOAK = ["make", "soak", "K8S=1.37", "RUNTIME=containerd", "SOAK_MINUTES=3", "SOAK_SEED=1"]


def test_ci_builds_then_runs_the_whole_e2e_on_1_37_with_containerd_then_a_short_soak(ci):
    assert ci.main() == 0
    assert ci.runs == [
        ["make", "cluster", "K8S=1.37"],
        ["make", "containerd"],
        ["make", "kueue"],  # Kueue's manager for e2e/test_kueue.py (docs/kueue.md)
        ["make", "e2e", "K8S=1.37", "RUNTIME=containerd"],
        SOAK,
    ]


def test_a_soak_violation_fails_ci(ci, capsys):
    ci.outcomes["soak"] = FakeBuild(rc=1)  # `make soak` exits 1 on any invariant violation
    assert ci.main() == 1
    assert ci.runs[-1] == SOAK
    out = capsys.readouterr().out
    assert "ci: soak FAILED on Kubernetes 1.37" in out and "exited 1" in out


def test_a_soak_over_its_budget_is_killed_and_fails_ci(ci, capsys, monkeypatch):
    monkeypatch.setenv("CARVE_CI_SOAK_BUDGET_S", "5")
    ci.outcomes["soak"] = FakeBuild(hangs=True)
    assert ci.main() == 1
    assert ["killpg", "4242"] in ci.runs
    assert "soak, seed 1 took longer than its budget of 5 s" in capsys.readouterr().out


def test_the_soak_runs_and_reports_even_when_the_e2e_failed(ci, monkeypatch):
    monkeypatch.setattr(ci.subprocess, "call", lambda argv, **kw: 1)
    assert ci.main() == 1
    assert ci.runs[-1] == SOAK


@pytest.mark.parametrize("target", ["cluster", "containerd", "kueue"])
def test_a_failed_build_fails_ci_without_a_lesser_e2e(ci, capsys, target):
    ci.outcomes[target] = FakeBuild(rc=2)
    assert ci.main() == 1
    assert not any(argv[:2] == ["make", "e2e"] for argv in ci.runs)
    assert all("fakecri" not in " ".join(argv) for argv in ci.runs)
    out = capsys.readouterr().out
    assert "ci: e2e FAILED to run on Kubernetes 1.37" in out and "exited 2" in out


@pytest.mark.parametrize("target", ["cluster", "containerd"])
def test_a_build_over_its_budget_is_killed_and_fails_ci(ci, capsys, monkeypatch, target):
    monkeypatch.setenv("CARVE_CI_E2E_BUILD_BUDGET_S", "5")
    monkeypatch.setenv("CARVE_CI_E2E_RUNTIME_BUDGET_S", "5")
    ci.outcomes[target] = FakeBuild(hangs=True)
    assert ci.main() == 1
    assert ["killpg", "4242"] in ci.runs
    assert not any(argv[:2] == ["make", "e2e"] for argv in ci.runs)
    assert "took longer than its budget of 5 s" in capsys.readouterr().out


def test_no_root_or_no_go_fails_ci(ci, capsys, monkeypatch):
    monkeypatch.setattr(ci.os, "geteuid", lambda: 1000)
    assert ci.main() == 1
    assert "need root" in capsys.readouterr().out
    monkeypatch.setattr(ci.os, "geteuid", lambda: 0)
    monkeypatch.setattr(ci.shutil, "which", lambda name: None)
    assert ci.main() == 1
    assert "there is no Go" in capsys.readouterr().out
    assert ci.runs == []


def test_a_failing_e2e_fails_ci(ci, monkeypatch):
    monkeypatch.setattr(ci.subprocess, "call", lambda argv, **kw: 1)
    assert ci.main() == 1


def test_only_the_explicit_opt_out_skips_the_step(ci, capsys, monkeypatch):
    monkeypatch.setenv("CARVE_CI_E2E", "0")
    assert ci.main() == 0
    assert ci.runs == []
    assert "ci: e2e NOT RUN: CARVE_CI_E2E=0" in capsys.readouterr().out


def test_another_minor_is_chosen_by_environment(ci, monkeypatch):
    monkeypatch.setenv("CARVE_CI_E2E_K8S", "1.36")
    assert ci.main() == 0
    assert ci.runs[-2] == ["make", "e2e", "K8S=1.36", "RUNTIME=containerd"]
    assert ci.runs[-1][:3] == ["make", "soak", "K8S=1.36"]
