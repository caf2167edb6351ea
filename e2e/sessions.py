"""A local cluster around a pytest fixture: start it, fail loudly when it does not come up, stop it after.

Fixtures `yield from cluster_session(...)`: a cluster that does not start fails the tests that need it with
the folder of its logs (a broken e2e must never pass as skipped), and CARVE_E2E_KEEP=1 keeps that folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster.launcher import Cluster


def cluster_session(c: Cluster, root: Path, what: str) -> Iterator[Cluster]:
    try:
        c.start()
    except Exception as e:
        c.stop()
        pytest.fail(f"e2e: the {what} did not start (logs in {root / 'logs'}): {e}")
    print(f"\ne2e: {what} up in {root}: " + ", ".join(f"{k} {v:.1f}s" for k, v in c.timings.items()))
    yield c
    c.stop()
    if os.environ.get("CARVE_E2E_KEEP") != "1":
        c.unmount_all()
        shutil.rmtree(root, ignore_errors=True)
