"""Running native/hook's carve-cdi-hook as a runtime does: OCI state on stdin, config.json naming the root.

The hook chroot()s, which needs root: as root it runs directly, otherwise in a user namespace
(`unshare -r`), where it is root of its own namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# CARVE_TEST_HOOK: run these tests against another build (the mutation check, docs/plugin.md).
HOOK = Path(os.environ.get("CARVE_TEST_HOOK") or REPO / "native/build/carve-cdi-hook")


class Container:
    """A container root (the image's files) and its bundle."""

    def __init__(self, tmp: Path, config: dict | None = None):
        self.bundle = tmp / "bundle"
        self.root = self.bundle / "rootfs"
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "proc").mkdir(
            exist_ok=True
        )  # every container root has one (the runtime mounts /proc there)
        config = config if config is not None else {"ociVersion": "1.2.0", "root": {"path": "rootfs"}}
        (self.bundle / "config.json").write_text(json.dumps(config))

    def state(self) -> str:
        return json.dumps(
            {"ociVersion": "1.2.0", "id": "c1", "status": "creating", "pid": 1, "bundle": str(self.bundle)}
        )

    def hook(
        self, *args: str, stdin: str | None = None, proc_at: str | None = None, wrap: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess:
        """Runs the hook on this container. `proc_at`: first a new pid and mount namespace, a shell as
        the hook's parent (pid 1), a fresh procfs mounted at that directory of the root, as when runc runs
        createContainer hooks (its init is pid 1 of the container and still has the host's "/"): that
        procfs's /1/root and /self/root are then this machine's "/"."""
        prefix = [] if os.geteuid() == 0 else ["unshare", "-r"]
        if proc_at:
            mount = 'mount -t proc proc "$0" && "$@"'  # sh stays pid 1, like runc init
            prefix += [
                "unshare",
                "-mpf",
                "--propagation",
                "private",
                "sh",
                "-c",
                mount,
                str(self.path(proc_at)),
            ]
        return subprocess.run(
            [*prefix, *wrap, str(HOOK), *args],
            input=self.state() if stdin is None else stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")


@pytest.fixture
def container(tmp_path) -> Container:
    if not HOOK.exists():
        pytest.fail(f"{HOOK} missing: run `make native`")
    return Container(tmp_path)


@pytest.fixture
def container_at(tmp_path):
    """A Container whose root is an existing directory (its bundle in tmp_path)."""

    def make(root: Path) -> Container:
        bundle = tmp_path / f"bundle-{len(list(tmp_path.iterdir()))}"
        c = Container(bundle, {"ociVersion": "1.2.0", "root": {"path": str(root)}})
        c.root = root
        return c

    return make
