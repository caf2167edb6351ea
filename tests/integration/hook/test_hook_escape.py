"""A hostile image cannot make carve-cdi-hook touch a host file (issue 17, the HIGH finding).

runc runs createContainer hooks from the container's init before pivot_root: the hook's "/" is the host's
and the container's /proc/1/root, /proc/self/root and /proc/<pid>/cwd lead there. These tests mount a
procfs into the container root as runc does (at /proc, which the hook detaches in its own namespace, and
at /altproc, which it does not know about, so only the kernel's RESOLVE_NO_MAGICLINKS / RESOLVE_NO_XDEV
stand in the way), give the image symlinks at every level of the paths the hooks write, and check a host
canary tree byte for byte afterwards. Links through /proc must fail the hook with a message naming the
path; links that stay in the root ("..", absolute) resolve inside it. test_hook_runc.py runs the same
attacks under real runc.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from support.driverroot import FAKES

from driver import names
from driver.plugin.container.libfiles import read_ld_cache

REPO = Path(__file__).resolve().parents[3]
LDCONFIG = str(REPO / "native/build/carve-ldconfig")
NO_OPENAT2 = REPO / "native/build/tests/no_openat2"
LIB = names.LIMITER_CONTAINER_PATH
PROCS = ("proc", "altproc")


def snapshot(top: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under `top`: its kind and content (file bytes, link text)."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(top))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", "")
            else:
                out[rel] = ("file", p.read_bytes())
    return out


@pytest.fixture
def host(tmp_path) -> Path:
    """The host's files an escaping hook would write: their contents are checked after every run."""
    top = tmp_path / "host"
    (top / "etc/ld.so.conf.d").mkdir(parents=True)
    (top / "etc/ld.so.preload").write_text("/host/canary.so\n")
    (top / "etc/ld.so.cache").write_bytes(b"host cache")
    (top / "etc/ld.so.conf").write_text("host conf\n")
    (top / "usr/lib64").mkdir(parents=True)
    (top / "usr/lib64/libcuda.so").write_text("host lib")
    os.symlink("host-target", top / "usr/lib64/libhost.so.1")
    return top


# name -> (symlinks to plant: container path -> link text with {proc} and {host}, escapes via /proc)
IMAGES: dict[str, tuple[dict[str, str], bool]] = {
    "etc to /proc/1/root": ({"/etc": "/{proc}/1/root{host}/etc"}, True),
    "etc to /proc/self/root": ({"/etc": "/{proc}/self/root{host}/etc"}, True),
    "etc to /proc/1/cwd": ({"/etc": "/{proc}/1/cwd/../../../../../../..{host}/etc"}, True),
    "etc relative to /proc": ({"/etc": "../{proc}/1/root{host}/etc"}, True),
    "preload file to /proc/1/root": ({"/etc/ld.so.preload": "/{proc}/1/root{host}/etc/ld.so.preload"}, True),
    "conf.d to /proc/1/root": ({"/etc/ld.so.conf.d": "/{proc}/1/root{host}/etc/ld.so.conf.d"}, True),
    "usr to /proc/1/root": ({"/usr": "/{proc}/1/root{host}/usr"}, True),
    "lib dir to /proc/1/root": ({"/usr/lib64": "/{proc}/1/root{host}/usr/lib64"}, True),
    "lib file to /proc/self/root": (
        {"/usr/lib64/libcuda.so": "/{proc}/self/root{host}/usr/lib64/libcuda.so"},
        False,
    ),
    "etc up and out": ({"/etc": "../../../../../../../..{host}/etc"}, False),
    "etc absolute host path": ({"/etc": "{host}/etc"}, False),
    "lib dir up to the top": ({"/usr/lib64": "../../../.."}, False),
    "lib dir absolute host path": ({"/usr/lib64": "{host}/usr/lib64"}, False),
}

# subcommand -> (arguments, the container paths its message may name)
SUBCOMMANDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "preload": (("preload", "--library", LIB), ("/etc/ld.so.preload",)),
    "create-symlinks": (
        ("create-symlinks", "--link", "libcuda.so.1::/usr/lib64/libcuda.so", "--link", "x.so::/etc/x.so"),
        ("/usr/lib64/libcuda.so", "/etc/x.so"),
    ),
    "update-ldcache": (
        ("update-ldcache", "--ldconfig", LDCONFIG, "--folder", "/usr/lib64"),
        ("/etc", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d/00-carve-driver.conf"),
    ),
}


def plant(container, links: dict[str, str], proc: str, host: Path) -> None:
    (container.path("/usr/lib64")).mkdir(parents=True, exist_ok=True)
    container.path("/etc").mkdir(exist_ok=True)
    container.path(f"/{proc}").mkdir(exist_ok=True)
    for path, text in links.items():
        p = container.path(path)
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(text.format(proc=proc, host=host), p)
    # the contained variants resolve to these paths inside the root: give them somewhere to land
    container.path(f"{host}/etc").mkdir(parents=True, exist_ok=True)
    container.path(f"{host}/usr/lib64").mkdir(parents=True, exist_ok=True)


@pytest.mark.parametrize("proc", PROCS)
@pytest.mark.parametrize("sub", sorted(SUBCOMMANDS))
@pytest.mark.parametrize("image", sorted(IMAGES))
def test_a_hostile_image_cannot_reach_host_files(container, host, image, sub, proc):
    links, via_proc = IMAGES[image]
    plant(container, links, proc, host)
    before = snapshot(host)
    args, named = SUBCOMMANDS[sub]
    done = container.hook(*args, proc_at=proc)
    assert snapshot(host) == before, done.stderr
    if via_proc and done.returncode != 0:
        assert any(p in done.stderr for p in named), done.stderr
    if via_proc and _writes_through(sub, links):
        assert done.returncode == 1, f"{image}: the hook wrote through a /proc link: {done.stderr}"


def _writes_through(sub: str, links: dict[str, str]) -> bool:
    """Whether subcommand `sub` must write below one of the planted links (so must fail)."""
    written = {
        "preload": ("/etc/ld.so.preload",),
        "create-symlinks": ("/usr/lib64/libcuda.so", "/etc/x.so"),
        "update-ldcache": ("/etc/ld.so.cache",),
    }[sub]
    return any(w == p or w.startswith(p + "/") for w in written for p in links if p != w)


def test_a_proc_link_failure_names_the_path(container, host):
    plant(container, {"/etc": "/proc/1/root{host}/etc"}, "proc", host)
    done = container.hook("preload", "--library", LIB, proc_at="proc")
    assert done.returncode == 1
    assert "preload: writing the container's /etc/ld.so.preload" in done.stderr


def test_a_link_into_an_undetached_proc_is_refused_by_the_kernel(container, host):
    # /altproc is not detached: only openat2's flags stop the walk (EXDEV: crossing into the mount)
    plant(container, {"/etc": "/altproc/1/root{host}/etc"}, "altproc", host)
    done = container.hook("preload", "--library", LIB, proc_at="altproc")
    assert done.returncode == 1
    assert "/etc/ld.so.preload" in done.stderr and "mount point" in done.stderr
    assert (host / "etc/ld.so.preload").read_text() == "/host/canary.so\n"


def test_contained_links_are_written_inside_the_root(container, host):
    plant(container, {"/etc": "../../../../../../../..{host}/etc"}, "proc", host)
    done = container.hook("preload", "--library", LIB, proc_at="proc")
    assert done.returncode == 0, done.stderr
    assert container.path(f"{host}/etc/ld.so.preload").read_text() == f"{LIB}\n"
    assert (host / "etc/ld.so.preload").read_text() == "/host/canary.so\n"


def build_lib(out: Path, soname: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text("int carve_test_symbol(void) { return 1; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(src)],
        check=True,
        capture_output=True,
    )
    src.unlink()
    return out


@pytest.mark.parametrize("proc", PROCS)
def test_a_traversing_soname_makes_no_link_and_no_cache_entry(container, host, tmp_path, proc):
    lib = container.path("/usr/lib64")
    lib.mkdir(parents=True)
    container.path(f"/{proc}").mkdir(exist_ok=True)
    evil = f"../../../../{proc}/1/root{host}/usr/lib64/libhost.so.1"
    build_lib(lib / "libevil.so.1.0", evil)
    build_lib(lib / "libslash.so.1.0", "sub/libslash.so.1")
    build_lib(lib / "libdot.so.1.0", "..")
    shutil.copy2(FAKES / "libcuda.so.1", lib / "libcuda.so.580.95.05")
    os.symlink("libcuda.so.580.95.05", lib / "libcuda.so.1")
    before = snapshot(host)
    image_before = {p for p, (kind, _) in snapshot(container.root).items() if kind == "link"}
    done = container.hook("update-ldcache", "--ldconfig", LDCONFIG, "--folder", "/usr/lib64", proc_at=proc)
    assert done.returncode == 0, done.stderr
    assert snapshot(host) == before
    for soname in (evil, "sub/libslash.so.1", ".."):
        assert f'refusing the SONAME "{soname}"' in done.stderr
    cache = read_ld_cache(container.path("/etc/ld.so.cache"))
    keys = {k for k, _ in cache}
    assert "libcuda.so.1" in keys  # the rest of the cache is intact
    assert not any("/" in k or k in (".", "..") for k in keys), keys
    # ldconfig made no link at all in the image
    assert {p for p, (kind, _) in snapshot(container.root).items() if kind == "link"} == image_before


def test_a_kernel_without_openat2_fails_closed(container):
    if not NO_OPENAT2.exists():
        pytest.fail(f"{NO_OPENAT2} missing: run `make native`")
    for sub, (args, _) in SUBCOMMANDS.items():
        done = container.hook(*args, wrap=(str(NO_OPENAT2),))
        assert done.returncode == 1, (sub, done.stderr)
        assert "openat2" in done.stderr and "Linux 5.6" in done.stderr and container.root.name in done.stderr
    assert not container.path("/etc").exists()


RENAME_EXCHANGE = 2
AT_FDCWD = -100


def _exchange(libc, a: bytes, b: bytes) -> None:
    libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)


@pytest.mark.parametrize("proc", PROCS)
def test_a_flipping_directory_never_lets_a_write_out(container, host, proc):
    """A sidecar swaps the image's /etc between a real directory and a link to the host's, as fast as it
    can, while the hook runs again and again: no run may write the host canary."""
    libc = ctypes.CDLL(None, use_errno=True)
    container.path(f"/{proc}").mkdir(exist_ok=True)
    etc = container.path("/etc")
    etc.mkdir()
    flip = container.path("/etc.flip")
    os.symlink(f"/{proc}/1/root{host}/etc", flip)
    before = snapshot(host)
    stop = threading.Event()

    def flipper() -> None:
        a, b = bytes(etc), bytes(flip)
        while not stop.is_set():
            _exchange(libc, a, b)

    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()
    outcomes = {"ok": 0, "refused": 0}
    try:
        for _ in range(40):
            done = container.hook("preload", "--library", LIB, proc_at=proc)
            assert done.returncode in (0, 1), done.stderr
            if done.returncode == 1:
                assert "/etc/ld.so.preload" in done.stderr, done.stderr
            outcomes["ok" if done.returncode == 0 else "refused"] += 1
            assert snapshot(host) == before, f"host written: {done.stderr}"
    finally:
        stop.set()
        thread.join()
    assert snapshot(host) == before
