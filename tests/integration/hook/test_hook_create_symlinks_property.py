"""create-symlinks through the real carve-cdi-hook binary (its main, the OCI state, contain_enter), fed
hostile images and arguments (issue 30). native/hook/fuzz/contain_fuzz.c fuzzes the same code in process;
here the whole command runs as a runtime runs it, with a procfs mounted in the root as runc has one, and
with a sidecar swapping a directory of the image for a link to the host while it works.

Properties: the host's files never change; exit status 2 exactly for malformed arguments, and then the
image is untouched; any other run answers 0 or 1.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hook_escape import _exchange, snapshot

EXAMPLES = int(os.environ.get("CARVE_HYPOTHESIS_EXAMPLES", "25"))

# Names an image and a --link may use: the directories the driver's links go to, and traversal.
COMPONENTS = st.sampled_from(["usr", "lib64", "etc", "lib", "x", "libcuda.so", "..", "."])
# Where an image's symlink may point ({host}: the host tree's absolute path; {proc}: the root's procfs).
LINK_TEXTS = st.sampled_from(
    [
        "{host}",
        "{host}/usr/lib64",
        "../../../../..{host}",
        "/{proc}/1/root{host}/usr",
        "/{proc}/self/root{host}",
        "/{proc}/self/fd/0",
        "..",
        "/",
        "usr",
        "lib64/../..",
    ]
)


@pytest.fixture
def host(tmp_path):
    """The host's driver directory an escaping hook would write: checked after every run."""
    top = tmp_path / "host"
    (top / "usr/lib64").mkdir(parents=True)
    (top / "usr/lib64/libcuda.so").write_text("host lib")
    os.symlink("host-target", top / "usr/lib64/libhost.so.1")
    return top


@st.composite
def images(draw) -> dict[str, str]:
    """Container path -> symlink text."""
    paths = draw(st.lists(st.lists(COMPONENTS, min_size=1, max_size=3), max_size=4))
    return {"/" + "/".join(p): draw(LINK_TEXTS) for p in paths if p[-1] not in ("..", ".")}


@st.composite
def link_args(draw) -> list[str]:
    """create-symlinks' arguments: mostly well formed, sometimes not."""
    args: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["libcuda.so.1", "{host}/usr/lib64/libcuda.so", "../../..{host}", ""]))
        link = "/".join(draw(st.lists(COMPONENTS, min_size=1, max_size=4)))
        sep = draw(st.sampled_from(["::/", "::/", "::/", "::", ":/", "/"]))
        flag = draw(st.sampled_from(["--link", "--link", "--link", "--lnk"]))
        args += [flag, f"{target}{sep}{link}"]
    if draw(st.booleans()) and draw(st.booleans()):
        args.append("--link")  # a flag without its value
    return args


def well_formed(args: list[str]) -> bool:
    """symlinks.c's rule: pairs of --link and <non-empty target>::/<link path>."""
    if len(args) % 2:
        return False
    for flag, spec in zip(args[::2], args[1::2], strict=True):
        target, sep, rest = spec.partition("::")
        if flag != "--link" or not sep or not target or not rest.startswith("/"):
            return False
    return True


def plant(container, image: dict[str, str], host) -> None:
    """Plant the image's links. Never through one: a parent that is a link (to the host, or to "/") is the
    hook's to resolve, not this test's, which would write on the machine itself."""
    for path, text in image.items():
        parts = path.strip("/").split("/")
        if {".", ".."} & set(parts):
            continue  # an image holds names, not traversals: "/../x" is no entry of its tree
        where, ok = container.root, True
        for part in parts[:-1]:
            where = where / part
            if where.is_symlink() or (where.exists() and not where.is_dir()):
                ok = False
                break
            where.mkdir(exist_ok=True)
        target = where / parts[-1]
        if ok and not os.path.lexists(target):
            os.symlink(text.format(host=host, proc="proc"), target)


def clear(container) -> None:
    """The root as Container made it (an empty /proc): the previous example's image removed, links
    unlinked, never followed."""
    for top in container.root.iterdir():
        if top.is_symlink():  # first: is_dir() would follow it (to /proc/self/fd/0, anywhere)
            top.unlink()
        elif top.name == "proc":
            continue
        elif top.is_dir():
            shutil.rmtree(top)
        else:
            top.unlink()
    container.path("/proc").mkdir(exist_ok=True)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(image=images(), args=link_args())
def test_create_symlinks_on_a_hostile_image_never_reaches_the_host(container, host, image, args):
    clear(container)
    plant(container, image, host)
    args = [a.format(host=host) for a in args]
    before_host, before_image = snapshot(host), snapshot(container.root)
    done = container.hook("create-symlinks", *args, proc_at="proc")
    assert snapshot(host) == before_host, done.stderr
    if well_formed(args):
        assert done.returncode in (0, 1), (args, done.returncode, done.stderr)
    else:
        assert done.returncode == 2, (args, done.returncode, done.stderr)
        assert snapshot(container.root) == before_image, "refused arguments, but the image changed"


@pytest.mark.parametrize("proc", ["proc", "altproc"])
def test_create_symlinks_under_a_flipping_directory_never_writes_out(container, host, proc):
    """A sidecar swaps the image's /usr/lib64 between a real directory and a link to the host's (through
    the root's procfs, and by absolute path) while create-symlinks runs again and again."""
    libc = ctypes.CDLL(None, use_errno=True)
    container.path(f"/{proc}").mkdir(exist_ok=True)
    lib = container.path("/usr/lib64")
    lib.mkdir(parents=True)
    flips = [container.path("/usr/lib64.flip1"), container.path("/usr/lib64.flip2")]
    os.symlink(f"/{proc}/1/root{host}/usr/lib64", flips[0])
    os.symlink(f"{host}/usr/lib64", flips[1])  # absolute: resolves inside the root, to nothing there
    before = snapshot(host)
    stop = threading.Event()

    def flipper() -> None:
        a, b, c = bytes(lib), bytes(flips[0]), bytes(flips[1])
        while not stop.is_set():
            _exchange(libc, a, b)
            _exchange(libc, a, c)

    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()
    outcomes = {0: 0, 1: 0}
    try:
        for _ in range(30):
            done = container.hook(
                "create-symlinks",
                "--link",
                "libcuda.so.1::/usr/lib64/libcuda.so",
                "--link",
                "libnvidia-ml.so.1::/usr/lib64/libnvidia-ml.so",
                proc_at=proc,
            )
            assert done.returncode in (0, 1), done.stderr
            if done.returncode == 1:
                assert "/usr/lib64/" in done.stderr, done.stderr
            outcomes[done.returncode] += 1
            assert snapshot(host) == before, f"host written: {done.stderr}"
    finally:
        stop.set()
        thread.join()
    assert snapshot(host) == before
