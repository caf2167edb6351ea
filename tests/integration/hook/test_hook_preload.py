"""`carve-cdi-hook preload`: the limiter merged into the image's /etc/ld.so.preload, safely, idempotently."""

from __future__ import annotations

import os

from driver import names

LIB = names.LIMITER_CONTAINER_PATH


def test_the_images_own_lines_are_kept_after_the_limiter(container):
    (container.path("/etc")).mkdir()
    container.path("/etc/ld.so.preload").write_text("/usr/lib/libjemalloc.so.2\n/opt/trace.so")
    done = container.hook("preload", "--library", LIB)
    assert done.returncode == 0, done.stderr
    merged = container.path("/etc/ld.so.preload").read_text()
    assert merged == f"{LIB}\n/usr/lib/libjemalloc.so.2\n/opt/trace.so\n"


def test_running_twice_changes_nothing(container):
    assert container.hook("preload", "--library", LIB).returncode == 0
    first = container.path("/etc/ld.so.preload").read_text()
    assert container.hook("preload", "--library", LIB).returncode == 0
    assert container.path("/etc/ld.so.preload").read_text() == first == f"{LIB}\n"


def test_an_image_without_etc_gets_one(container):
    assert container.hook("preload", "--library", LIB).returncode == 0
    assert container.path("/etc/ld.so.preload").read_text() == f"{LIB}\n"
    assert oct(container.path("/etc/ld.so.preload").stat().st_mode & 0o777) == "0o644"


def test_a_symlink_pointing_outside_the_root_is_not_followed(container, tmp_path):
    victim = tmp_path / "host-file"
    victim.write_text("host content\n")
    container.path("/etc").mkdir()
    os.symlink(str(victim), container.path("/etc/ld.so.preload"))  # absolute: the host's path
    done = container.hook("preload", "--library", LIB)
    assert done.returncode == 0, done.stderr
    assert "symlink" in done.stderr
    assert victim.read_text() == "host content\n"
    preload = container.path("/etc/ld.so.preload")
    assert not preload.is_symlink() and preload.read_text() == f"{LIB}\n"


def test_an_etc_symlink_resolves_inside_the_root(container, tmp_path):
    outside = tmp_path / "outside-etc"
    outside.mkdir()
    os.symlink(f"/../../../..{outside}", container.path("/etc"))  # ".." and absolute: both stay inside
    container.path(str(outside)).mkdir(parents=True)  # the same path inside the root
    done = container.hook("preload", "--library", LIB)
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == []
    assert container.path(f"{outside}/ld.so.preload").read_text() == f"{LIB}\n"


def test_a_fifo_is_refused_without_hanging(container):
    container.path("/etc").mkdir()
    os.mkfifo(container.path("/etc/ld.so.preload"))
    done = container.hook("preload", "--library", LIB)
    assert done.returncode == 1
    assert "not a regular file" in done.stderr


def test_an_oversized_preload_file_is_refused(container):
    container.path("/etc").mkdir()
    container.path("/etc/ld.so.preload").write_text("x" * (65 * 1024))
    done = container.hook("preload", "--library", LIB)
    assert done.returncode == 1 and "File too large" in done.stderr


def test_a_relative_or_blank_library_path_is_a_usage_error(container):
    assert container.hook("preload", "--library", "libx.so").returncode == 2
    assert container.hook("preload", "--library", "/a b.so").returncode == 2
    assert not container.path("/etc/ld.so.preload").exists()


def test_the_root_comes_from_the_bundle_config_not_a_nested_key(container, tmp_path):
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    decoy_root = '{"root": {"path": "' + str(decoy) + '"}}'
    config = (
        '{"annotations": ' + decoy_root + ', "process": {"args": ["a\\"b", "\\u0041"]},'
        ' "root": {"readonly": false, "path": "rootfs"}}'
    )
    (container.bundle / "config.json").write_text(config)
    assert container.hook("preload", "--library", LIB).returncode == 0
    assert container.path("/etc/ld.so.preload").exists() and list(decoy.iterdir()) == []


def test_malformed_state_or_config_fails_clearly(container):
    done = container.hook("preload", "--library", LIB, stdin='{"bundle": ')
    assert done.returncode == 1 and 'no absolute "bundle"' in done.stderr
    (container.bundle / "config.json").write_text('{"root": {"path": "rootfs"}} trailing')
    done = container.hook("preload", "--library", LIB)
    assert done.returncode == 1 and "root" in done.stderr
    assert not container.path("/etc/ld.so.preload").exists()
