"""Paths inside a driver root resolved as the host would with the root as "/" (driverfiles.resolve_within):
a chain of up to 40 symlinks is followed, the kernel's limit, and one longer or a loop gives None, promptly;
an absolute target means <root>/<target>; ".." steps up, never above the root."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from driver.plugin.container.driverfiles import resolve_within


def _resolve(root: Path, path: Path) -> Path | None:
    """resolve_within in a thread, so a loop that is never detected fails the test instead of hanging it."""
    out: list[Path | None] = []
    t = threading.Thread(target=lambda: out.append(resolve_within(root, path)), daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), f"resolve_within({path}) did not return"
    return out[0]


def _chain(root: Path, n: int) -> Path:
    """lib/l0 -> l1 -> ... -> l<n> (a file): n links to follow from l0."""
    lib = root / "lib"
    lib.mkdir(parents=True)
    (lib / f"l{n}").write_text("x")
    for i in range(n):
        os.symlink(f"l{i + 1}", lib / f"l{i}")
    return lib / "l0"


def test_a_chain_of_40_links_is_followed(tmp_path):
    start = _chain(tmp_path, 40)
    assert _resolve(tmp_path, start) == tmp_path / "lib" / "l40"


def test_a_chain_of_41_links_gives_none(tmp_path):
    assert _resolve(tmp_path, _chain(tmp_path, 41)) is None


def test_a_link_loop_gives_none(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    os.symlink("b", lib / "a")
    os.symlink("a", lib / "b")
    assert _resolve(tmp_path, lib / "a") is None


def test_absolute_targets_and_dot_dot_stay_inside_the_root(tmp_path):
    (tmp_path / "usr/lib64").mkdir(parents=True)
    (tmp_path / "usr/lib64/libcuda.so.580").write_text("x")
    os.symlink("/usr/lib64/libcuda.so.580", tmp_path / "usr/lib64/libcuda.so.1")  # absolute: inside the root
    assert _resolve(tmp_path, tmp_path / "usr/lib64/libcuda.so.1") == tmp_path / "usr/lib64/libcuda.so.580"
    (tmp_path / "lib").mkdir()
    os.symlink("../usr/lib64/libcuda.so.580", tmp_path / "lib/rel")  # ".." steps up one directory
    assert _resolve(tmp_path, tmp_path / "lib/rel") == tmp_path / "usr/lib64/libcuda.so.580"
    os.symlink("../../../../usr/lib64/libcuda.so.580", tmp_path / "lib/climb")  # never above the root
    assert _resolve(tmp_path, tmp_path / "lib/climb") == tmp_path / "usr/lib64/libcuda.so.580"
    os.symlink("./.././usr//lib64/libcuda.so.580", tmp_path / "lib/dots")  # "." and empty parts skipped
    assert _resolve(tmp_path, tmp_path / "lib/dots") == tmp_path / "usr/lib64/libcuda.so.580"
    (tmp_path / "opt/a/b").mkdir(parents=True)
    (tmp_path / "opt/a/+x").mkdir()  # a name that sorts before ".." is a name like any other
    (tmp_path / "opt/a/+x/lib.so").write_text("x")
    os.symlink("../+x/lib.so", tmp_path / "opt/a/b/up")  # one level up from b is a, not the root
    assert _resolve(tmp_path, tmp_path / "opt/a/b/up") == tmp_path / "opt/a/+x/lib.so"
    os.symlink("/usr/lib64/missing", tmp_path / "lib/dangling")
    assert _resolve(tmp_path, tmp_path / "lib/dangling") is None
