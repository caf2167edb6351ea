"""`carve demo` runs end to end on fake GPUs without root and leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys

from support.plugin_harness import REPO


def test_demo_prepares_three_claims_and_cleans_up():
    out = subprocess.run(
        [sys.executable, "-m", "driver.cli", "demo"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "claim demo/soft-4gi-30pct" in text and "CARVE_MEMORY_LIMIT_0=4294967296" in text
    assert "CARVE_CORES_LIMIT_0=30" in text
    assert "claim demo/mig-1g10gb" in text and "    MIG    MIG-" in text
    assert "claim demo/whole-t4" in text and "-> gpu-2" in text
    assert text.count("k8s.gpu.carve.dev/claim=") == 3
    assert "unprepared 3/3 claims; MIG instances live: 0; CDI specs: 0; checkpoint claims: 0" in text
    # every claim gets the node's driver libraries, found under the demo's fake driver root
    lib = "/usr/lib64/libcuda.so.580.95.05"
    assert text.count(f"mount  {lib} <- $TMP/driver-root{lib} (ro)") == 3
    assert text.count("hook   update-ldcache /usr/lib64") == 3
    assert text.count("hook   preload /usr/local/carve/lib/libcarve-limiter.so") == 1  # the soft slice only
    assert "/dev/nvidia-caps/nvidia-cap" in text  # the MIG claim's capability nodes
