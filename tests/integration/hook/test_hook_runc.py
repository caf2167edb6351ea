"""carve-cdi-hook as a real createContainer hook under `runc run`: exactly the setting of the attack.

runc runs createContainer hooks from the container's init, in the container's mount and pid namespaces,
after mounting the container's /proc and before pivot_root: there /proc/1/root is the host's "/". A tiny
bundle (a static program as the only file of the image, the hooks in config.json as carve's CDI spec
names them) is started with runc; a hostile image must not start and must leave the host canary as it
was, a benign one must start with the hooks' work done. Skipped only where runc is missing or we are not
root (CI installs runc: `make containerd`).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from test_hook_escape import LDCONFIG, build_lib, snapshot

from driver import names
from driver.plugin.container.libfiles import read_ld_cache

REPO = Path(__file__).resolve().parents[3]
HOOK = Path(os.environ.get("CARVE_TEST_HOOK") or REPO / "native/build/carve-cdi-hook")
LIB = names.LIMITER_CONTAINER_PATH
RUNC = shutil.which("runc")


@pytest.fixture(scope="module")
def exit0(tmp_path_factory) -> Path:
    if not RUNC:
        pytest.skip("runc is not installed (apt-get install runc, or `make containerd`)")
    if os.geteuid() != 0:
        pytest.skip("runc run needs root")
    out = tmp_path_factory.mktemp("exit0") / "exit0"
    src = out.with_suffix(".c")
    src.write_text("int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-static", "-O2", "-o", str(out), str(src)], check=True, capture_output=True)
    return out


class Bundle:
    def __init__(self, top: Path, exit0: Path):
        self.top = top
        self.dir = top / "bundle"
        self.root = self.dir / "rootfs"
        self.root.mkdir(parents=True)
        shutil.copy2(exit0, self.root / "exit0")
        for d in ("proc", "sys", "dev", "etc", "usr/lib64"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.runs = 0

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")

    def run(self, *hooks: tuple[str, ...], mounts: tuple[dict, ...] = ()) -> subprocess.CompletedProcess:
        config_path = self.dir / "config.json"
        config_path.unlink(missing_ok=True)
        subprocess.run([RUNC, "spec", "--bundle", str(self.dir)], check=True, capture_output=True)
        config = json.loads(config_path.read_text())
        config["process"]["args"] = ["/exit0"]
        config["process"]["terminal"] = False
        config["root"] = {"path": "rootfs", "readonly": False}
        config["mounts"] += list(mounts)
        config["hooks"] = {
            "createContainer": [{"path": str(HOOK), "args": ["carve-cdi-hook", *h]} for h in hooks]
        }
        config_path.write_text(json.dumps(config))
        self.runs += 1
        cid = f"carve-hook-test-{os.getpid()}-{id(self)}-{self.runs}"
        state = self.top / "runc-state"
        try:
            return subprocess.run(
                [RUNC, "--root", str(state), "run", "--bundle", str(self.dir), cid],
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            subprocess.run([RUNC, "--root", str(state), "delete", "--force", cid], capture_output=True)


@pytest.fixture
def bundle(tmp_path, exit0) -> Bundle:
    return Bundle(tmp_path, exit0)


@pytest.fixture
def host(tmp_path) -> Path:
    top = tmp_path / "host"
    (top / "etc/ld.so.conf.d").mkdir(parents=True)
    (top / "etc/ld.so.preload").write_text("/host/canary.so\n")
    (top / "etc/ld.so.cache").write_bytes(b"host cache")
    (top / "usr/lib64").mkdir(parents=True)
    (top / "usr/lib64/libcuda.so").write_text("host lib")
    return top


HOOKS = {
    "preload": ("preload", "--library", LIB),
    "create-symlinks": (
        "create-symlinks",
        "--link",
        "libcuda.so.1::/usr/lib64/libcuda.so",
        "--link",
        "x::/etc/x",
    ),
    "update-ldcache": ("update-ldcache", "--ldconfig", LDCONFIG, "--folder", "/usr/lib64"),
}
# the image's link -> where it points (via the container's own /proc, as runc mounted it)
ATTACKS = {
    "etc to /proc/1/root": ("/etc", "/proc/1/root{host}/etc"),
    "etc to /proc/self/root": ("/etc", "/proc/self/root{host}/etc"),
    "etc to /proc/1/cwd": ("/etc", "/proc/1/cwd/../../../../../../../..{host}/etc"),
    "lib dir to /proc/1/root": ("/usr/lib64", "/proc/1/root{host}/usr/lib64"),
    "preload file to /proc/1/root": ("/etc/ld.so.preload", "/proc/1/root{host}/etc/ld.so.preload"),
}
# the directories each hook writes in: a link there (or above) must stop the container
WRITES = {"preload": ("/etc",), "create-symlinks": ("/etc", "/usr/lib64"), "update-ldcache": ("/etc",)}


def plant(bundle: Bundle, link: str, text: str, host: Path) -> None:
    p = bundle.path(link)
    if p.is_dir():
        shutil.rmtree(p)
    os.symlink(text.format(host=host), p)


def test_a_benign_image_starts_with_the_hooks_work_done(bundle):
    lib = bundle.path("/usr/lib64")
    build_lib(lib / "libcuda.so.580.95.05", "libcuda.so.1")
    done = bundle.run(
        ("create-symlinks", "--link", "libcuda.so.580.95.05::/usr/lib64/libcuda.so.1"),
        HOOKS["update-ldcache"],
        HOOKS["preload"],
    )
    assert done.returncode == 0, done.stderr
    assert bundle.path("/etc/ld.so.preload").read_text() == f"{LIB}\n"
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.580.95.05"
    assert ("libcuda.so.1", "/usr/lib64/libcuda.so.1") in read_ld_cache(bundle.path("/etc/ld.so.cache"))


@pytest.mark.parametrize("sub", sorted(HOOKS))
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_hostile_image_does_not_start_and_the_host_is_untouched(bundle, host, attack, sub):
    link, text = ATTACKS[attack]
    plant(bundle, link, text, host)
    before = snapshot(host)
    done = bundle.run(HOOKS[sub])
    assert snapshot(host) == before, done.stderr
    if any(w == link or w.startswith(link + "/") for w in WRITES[sub]):
        assert done.returncode != 0, f"started through {attack}"
        assert "carve-cdi-hook: error" in done.stderr and link in done.stderr, done.stderr


def test_the_hook_not_runc_stops_a_pod_like_container(bundle, host, tmp_path):
    """As the kubelet asks for: /etc/hosts bind-mounted into an image whose /etc leads to the host. runc
    places the mount inside the root (its own contained resolution); the hook then refuses, so the pod's
    status shows carve-cdi-hook's message (what e2e/test_hook_escape.py checks on a cluster)."""
    hosts = tmp_path / "etc-hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    plant(bundle, *ATTACKS["etc to /proc/1/root"], host)
    before = snapshot(host)
    bind = {"destination": "/etc/hosts", "type": "bind", "source": str(hosts), "options": ["rbind", "ro"]}
    done = bundle.run(HOOKS["preload"], mounts=(bind,))
    assert done.returncode != 0
    assert "carve-cdi-hook: error: preload: writing the container's /etc/ld.so.preload" in done.stderr
    assert snapshot(host) == before


def test_a_traversing_soname_under_runc(bundle, host):
    lib = bundle.path("/usr/lib64")
    build_lib(lib / "libevil.so.1.0", f"../../../../proc/1/root{host}/usr/lib64/libcuda.so")
    build_lib(lib / "libslash.so.1.0", "/etc/ld.so.preload")
    before = snapshot(host)
    done = bundle.run(HOOKS["update-ldcache"])
    assert done.returncode == 0, done.stderr
    assert snapshot(host) == before
    keys = {k for k, _ in read_ld_cache(bundle.path("/etc/ld.so.cache"))}
    assert not any("/" in k for k in keys), keys
    assert not bundle.path("/etc/ld.so.preload").exists()


def test_a_flipping_directory_under_runc(bundle, host):
    """A sidecar swaps /etc between a directory and a link to the host's /etc while runc starts the
    container again and again with the preload hook."""
    libc = ctypes.CDLL(None, use_errno=True)
    flip = bundle.path("/etc.flip")
    os.symlink(f"/proc/1/root{host}/etc", flip)
    before = snapshot(host)
    stop = threading.Event()

    def flipper() -> None:
        a, b = bytes(bundle.path("/etc")), bytes(flip)
        while not stop.is_set():
            libc.renameat2(-100, a, -100, b, 2)  # RENAME_EXCHANGE

    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()
    try:
        for _ in range(15):
            done = bundle.run(HOOKS["preload"])
            assert snapshot(host) == before, f"host written: {done.stderr}"
            if done.returncode != 0:
                assert "/etc/ld.so.preload" in done.stderr, done.stderr
    finally:
        stop.set()
        thread.join()
