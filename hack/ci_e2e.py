"""CI's e2e step (.ci/run, after `make test`): `make e2e` on one Kubernetes minor, with real containers.

CI runs on a fresh clone of a 2-core machine with a 90-minute limit. This step always runs the whole e2e
of CARVE_CI_E2E_K8S (default 1.37, the current Kubernetes release) on containerd + runc, or fails:
- it builds the cluster binary (`make cluster`, .tools/k8s/<version>/k8s) when it is missing, within
  CARVE_CI_E2E_BUILD_BUDGET_S (default 2700 s; docs/e2e.md has the measured cold build times);
- it builds containerd (`make containerd`, which installs Debian's runc and CNI plugins with apt-get where
  they are missing, waiting for the dpkg lock) within CARVE_CI_E2E_RUNTIME_BUDGET_S (default 1200 s);
- `make e2e` itself installs Debian's prometheus where it is missing (`e2e-deps`, hack/test_deps.sh: the
  real Prometheus of e2e/test_monitoring.py; `make test` before it has installed it already);
- a build that fails or runs over its budget, a machine without root or without Go, fails CI with a banner
  naming the cause. There is no lesser e2e to fall back to: no skip and no fake container runtime.
After the e2e, a short soak (`make soak`, docs/reliability.md) on the same cluster binaries:
CARVE_CI_SOAK_MINUTES (default 3) of pods of every kind while seeded faults hit (CARVE_CI_SOAK_SEED, default
1), within CARVE_CI_SOAK_BUDGET_S (default 900 s); any invariant violation (the soak exits 1), or an overrun,
fails CI. It runs even when the e2e failed, so one CI run reports both.
CARVE_CI_E2E=0 turns the step off, for a developer's own runs of .ci/run only: it says so in a banner.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.cluster.versions import DEFAULT_MINOR, resolve  # noqa: E402

BAR = "=" * 100


def banner(text: str) -> None:
    print(f"{BAR}\n{text}\n{BAR}", flush=True)


class CiFailure(Exception):
    """The e2e step cannot run as CI requires; the message says why and what to do."""


CACHE_HINT = "docs/e2e.md has the measured times; a cached .tools/ avoids the build"


def build(argv: list[str], what: str, budget_s: float, hint: str = CACHE_HINT) -> None:
    """Runs a build (or the soak) within its budget; a failure or an overrun raises CiFailure."""
    print(f"ci: {what} (budget {budget_s:.0f} s): {' '.join(argv)}", flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, start_new_session=True)
    try:
        rc = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        raise CiFailure(
            f"{what} took longer than its budget of {budget_s:.0f} s on this machine ({hint})"
        ) from None
    if rc != 0:
        raise CiFailure(f"{what} failed (`{' '.join(argv)}` exited {rc}); see its output above")
    print(f"ci: {what} done in {time.monotonic() - start:.0f} s", flush=True)


def run_e2e(minor: str) -> int:
    version = resolve(minor)
    if os.geteuid() != 0:
        raise CiFailure("the kubelets and containers need root and this CI user is not root")
    if not version.binary.exists():
        if not shutil.which("go"):
            raise CiFailure(f"{version.binary} is not built and there is no Go (>= 1.26) to build it")
        budget = float(os.environ.get("CARVE_CI_E2E_BUILD_BUDGET_S", "2700"))
        build(
            ["make", "cluster", f"K8S={minor}"],
            f"building the Kubernetes {version.patch} cluster binary",
            budget,
        )
    budget = float(os.environ.get("CARVE_CI_E2E_RUNTIME_BUDGET_S", "1200"))
    build(["make", "containerd"], "building containerd and installing runc and the CNI plugins", budget)
    # Kueue's manager for e2e/test_kueue.py (docs/kueue.md): built once into .tools/kueue/<version>.
    budget = float(os.environ.get("CARVE_CI_KUEUE_BUILD_BUDGET_S", "1200"))
    build(["make", "kueue"], "building Kueue's manager", budget)
    start = time.monotonic()
    rc = subprocess.call(["make", "e2e", f"K8S={minor}", "RUNTIME=containerd"], cwd=REPO)
    print(f"ci: e2e on {version.label} with containerd exited {rc} after {time.monotonic() - start:.0f} s")
    return rc


def run_soak(minor: str) -> None:
    """The short soak on the cluster binaries the e2e used; a violation or an overrun raises CiFailure."""
    minutes = os.environ.get("CARVE_CI_SOAK_MINUTES", "3")
    seed = os.environ.get("CARVE_CI_SOAK_SEED", "1")
    budget = float(os.environ.get("CARVE_CI_SOAK_BUDGET_S", "900"))
    argv = [
        "make",
        "soak",
        f"K8S={minor}",
        "RUNTIME=containerd",
        f"SOAK_MINUTES={minutes}",
        f"SOAK_SEED={seed}",
    ]
    # The soak's last line says `soak: <pods> pods, <faults> faults, <violations> violations`; it exits 1
    # on any violation, which build() turns into CI's failure.
    build(argv, f"a {minutes}-minute soak, seed {seed}", budget, "docs/reliability.md has its measured times")


def main() -> int:
    minor = os.environ.get("CARVE_CI_E2E_K8S", DEFAULT_MINOR)
    if os.environ.get("CARVE_CI_E2E", "1") == "0":
        banner("ci: e2e NOT RUN: CARVE_CI_E2E=0 (a developer's opt-out; CI itself never sets it)")
        return 0
    try:
        rc = run_e2e(minor)
    except (CiFailure, ValueError) as e:
        banner(f"ci: e2e FAILED to run on Kubernetes {minor}: {e}")
        return 1
    try:
        run_soak(minor)
    except CiFailure as e:
        banner(f"ci: soak FAILED on Kubernetes {minor}: {e}")
        return 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
