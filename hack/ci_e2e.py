"""CI's e2e step (.ci/run, after `make test`): `make e2e` for one Kubernetes minor when it fits CI.

CI runs on a fresh clone of a 2-core machine with a 90-minute limit. A cold build of the cluster binary
takes tens of minutes there (docs/e2e.md has the measured time), so this step:
- runs `make e2e` when the binary is already built (.tools/k8s/<version>/k8s, e.g. a cached workspace);
- else builds it with `make cluster` inside a time budget (CARVE_CI_E2E_BUILD_BUDGET_S, default 2700 s)
  and runs the e2e if the build finished in time;
- else says loudly that the e2e was skipped and why, and exits 0: a machine too slow to build is not a
  failure of the code. Any e2e test failure fails CI.
CARVE_CI_E2E=0 skips the step (with a message), CARVE_CI_E2E_BUILD=0 skips building.
The nodes run real containers (RUNTIME=containerd) when `make containerd` (which installs runc and the CNI
plugins with apt-get where they are missing) builds within CARVE_CI_E2E_RUNTIME_BUDGET_S (default 1200 s);
else the e2e runs on the fake CRI (RUNTIME=fakecri, the container-view tests skipped) and says so loudly.
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

from e2e.cluster.versions import resolve  # noqa: E402


def skipped(why: str) -> int:
    bar = "=" * 100
    print(f"{bar}\nci: e2e SKIPPED: {why}\n{bar}", flush=True)
    return 0


def runtime() -> str:
    """containerd when this machine can run it (building it within the budget), else fakecri, loudly."""
    budget = float(os.environ.get("CARVE_CI_E2E_RUNTIME_BUDGET_S", "1200"))
    proc = subprocess.Popen(["make", "containerd"], cwd=REPO, start_new_session=True)
    try:
        rc = proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        return _fake_cri(f"building containerd took longer than {budget:.0f} s")
    return "containerd" if rc == 0 else _fake_cri(f"`make containerd` failed ({rc}); see its output above")


def _fake_cri(why: str) -> str:
    bar = "=" * 100
    print(f"{bar}\nci: e2e on the FAKE CRI (no real containers): {why}\n{bar}", flush=True)
    return "fakecri"


def main() -> int:
    minor = os.environ.get("CARVE_CI_E2E_K8S", "1.36")
    if os.environ.get("CARVE_CI_E2E", "1") == "0":
        return skipped("CARVE_CI_E2E=0")
    version = resolve(minor)
    if os.geteuid() != 0:
        return skipped("the kubelets need root and this CI user is not root")
    if not version.binary.exists() and not shutil.which("go"):
        return skipped(f"{version.binary} is not built and there is no Go to build it")
    if not version.binary.exists():
        if os.environ.get("CARVE_CI_E2E_BUILD", "1") == "0":
            return skipped(f"{version.binary} is not built and CARVE_CI_E2E_BUILD=0")
        budget = float(os.environ.get("CARVE_CI_E2E_BUILD_BUDGET_S", "2700"))
        print(f"ci: building the {version.patch} cluster binary (budget {budget:.0f} s)", flush=True)
        start = time.monotonic()
        proc = subprocess.Popen(["make", "cluster", f"K8S={minor}"], cwd=REPO, start_new_session=True)
        try:
            rc = proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            return skipped(
                f"building {version.patch} took longer than {budget:.0f} s on this machine "
                f"(docs/e2e.md); run `make cluster K8S={minor}` once to cache it"
            )
        if rc != 0:
            # A module proxy that does not answer is the usual cause: the environment, not the code.
            return skipped(f"`make cluster K8S={minor}` failed ({rc}); see its output above")
        print(f"ci: cluster binary built in {time.monotonic() - start:.0f} s", flush=True)
    return subprocess.call(["make", "e2e", f"K8S={minor}", f"RUNTIME={runtime()}"], cwd=REPO)


if __name__ == "__main__":
    raise SystemExit(main())
