"""The preload hook's file as glibc's own loader reads it: the limiter mapped, first, whatever the image had.

Each case is an image's /etc/ld.so.preload. A real dynamic program (native/tests/preload_order_probe,
which prints the loaded objects in link-map order) runs chroot'ed in a small image root, first under the
image's file (so the table's `before` is what glibc really preloads from it, not what we think it does),
then under the file the hook wrote: the limiter must come first and once, then the image's libraries in
their order. Cases cover what glibc's parser does (elf/rtld.c): '#' comments (and its quirk of scanning
only the file's first bytes after the first comment), ' ', '\t', '\n' and ':' as separators, '\r' not one,
a last name without a separator.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.cdi_sandbox import image_root, sandbox_available

from driver import names

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "native/build/tests/preload_order_probe"
LIMITER = REPO / names.LIMITER_BUILD_PATH
L = names.LIMITER_CONTAINER_PATH
A = "/opt/liba.so"
B = "/opt/libb.so"
HOST_LIBS = Path("/lib/x86_64-linux-gnu")

# (image's file, what glibc preloads from it, of L, A and B)
CASES = {
    "plain lines": (f"{A}\n{B}\n", [A, B]),
    "limiter commented out": (f"# {L}\n{A}\n", [A]),
    "limiter hash-prefixed": (f"#{L}\n", []),
    "limiter with a carriage return": (f"{L}\r\n{A}\n", [A]),
    "image before the limiter on one line": (f"{A} {L}\n", [A, L]),
    "colons, no final separator": (f"{A}:{L}:{B}", [A, L, B]),
    "tabs and a trailing comment": (f"\t{A}  # {B}\n{B}", [A, B]),
    "glibc's comment-window quirk": (f"{A}\n#x\n{B}\n#{L}\n", [A, B]),
    # after the first comment glibc searches only the file's first bytes: the second '#' is blanked
    # alone and the rest of that line is read as names
    "a second comment only half blanked": (f"{B}\n#c\n#y {A}\n", [B, A]),
    "an image library commented out": (f"# {A}\n{B}\n", [B]),
    "an image library with a carriage return": (f"{A}\r\n", []),
    "empty file": ("", []),
    "two copies of the limiter": (f"{L}\n{A}\n{L}\n", [L, A]),
}


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    reason = sandbox_available()
    if reason:
        pytest.skip(f"needs chroot: {reason}")
    for built in (PROBE, LIMITER):
        if not built.exists():
            pytest.fail(f"{built} missing: run `make native`")
    root = image_root(tmp_path_factory.mktemp("img") / "rootfs", {"/probe": PROBE}, extra_libs=(LIMITER,))
    dest = root / L.lstrip("/")
    dest.parent.mkdir(parents=True)
    shutil.copy2(LIMITER, dest)
    (root / "opt").mkdir()
    shutil.copy2(HOST_LIBS / "libm.so.6", root / A.lstrip("/"))
    shutil.copy2(HOST_LIBS / "libresolv.so.2", root / B.lstrip("/"))
    (root / "proc").mkdir()
    return root


def preloaded(root: Path) -> list[str]:
    """The objects glibc mapped for the probe in `root`, among L, A and B, in link-map order."""
    done = subprocess.run(["chroot", str(root), "/probe"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line in (L, A, B)]


def set_preload(root: Path, text: str | None) -> None:
    path = root / "etc/ld.so.preload"
    path.unlink(missing_ok=True)
    if text is not None:
        path.write_text(text)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_limiter_is_loaded_first_under_every_image_file(image, container_at, case):
    text, before = CASES[case]
    set_preload(image, text)
    assert preloaded(image) == before, "the table disagrees with this glibc"
    done = container_at(image).hook("preload", "--library", L)
    assert done.returncode == 0, done.stderr
    after = preloaded(image)
    assert after == [L] + [x for x in before if x != L]
    # once more: the same bytes (idempotent)
    first = (image / "etc/ld.so.preload").read_bytes()
    assert container_at(image).hook("preload", "--library", L).returncode == 0
    assert (image / "etc/ld.so.preload").read_bytes() == first


def test_no_image_file_gets_the_limiter_alone(image, container_at):
    set_preload(image, None)
    assert container_at(image).hook("preload", "--library", L).returncode == 0
    assert preloaded(image) == [L]
    assert (image / "etc/ld.so.preload").read_text() == f"{L}\n"
