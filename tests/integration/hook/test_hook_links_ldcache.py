"""`carve-cdi-hook create-symlinks` and `update-ldcache` inside a container root."""

from __future__ import annotations

import os
import shutil

from support.driverroot import FAKES

from driver.plugin.container.libfiles import read_ld_cache

LDCONFIG = "/sbin/ldconfig"


def test_links_are_created_kept_or_replaced(container):
    lib = container.path("/usr/lib64")
    lib.mkdir(parents=True)
    os.symlink("libcuda.so.1", lib / "libcuda.so")  # already right: kept
    (lib / "libnvidia-ml.so.1").write_text("stale copy")  # a file in the way: replaced
    done = container.hook(
        "create-symlinks",
        "--link", "libcuda.so.1::/usr/lib64/libcuda.so",
        "--link", "libnvidia-ml.so.580.95.05::/usr/lib64/libnvidia-ml.so.1",
        "--link", "libx.so.1::/opt/new/dir/libx.so",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert os.readlink(lib / "libcuda.so") == "libcuda.so.1"
    assert os.readlink(lib / "libnvidia-ml.so.1") == "libnvidia-ml.so.580.95.05"
    assert os.readlink(container.path("/opt/new/dir/libx.so")) == "libx.so.1"


def test_a_link_path_cannot_leave_the_root(container, tmp_path):
    done = container.hook("create-symlinks", "--link", f"x::/../../../..{tmp_path}/escaped")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "escaped").is_symlink()
    assert container.path(f"{tmp_path}/escaped").is_symlink()


def test_a_directory_in_the_way_fails(container):
    container.path("/usr/lib64/libcuda.so").mkdir(parents=True)
    done = container.hook("create-symlinks", "--link", "libcuda.so.1::/usr/lib64/libcuda.so")
    assert done.returncode == 1 and "is a directory" in done.stderr


def test_bad_link_specs_are_usage_errors(container):
    assert container.hook("create-symlinks", "--link", "nocolons").returncode == 2
    assert container.hook("create-symlinks", "--link", "a::relative/link").returncode == 2


def test_the_ld_cache_knows_the_driver_folder_and_keeps_it_in_a_drop_in(container):
    lib = container.path("/opt/nvidia/lib")
    lib.mkdir(parents=True)
    shutil.copy2(FAKES / "libcuda.so.1", lib / "libcuda.so.580.95.05")
    os.symlink("libcuda.so.580.95.05", lib / "libcuda.so.1")
    done = container.hook("update-ldcache", "--ldconfig", LDCONFIG, "--folder", "/opt/nvidia/lib")
    assert done.returncode == 0, done.stderr
    cache = read_ld_cache(container.path("/etc/ld.so.cache"))
    assert ("libcuda.so.1", "/opt/nvidia/lib/libcuda.so.1") in cache
    assert container.path("/etc/ld.so.conf.d/00-carve-driver.conf").read_text() == "/opt/nvidia/lib\n"
    # a distroless image had no ld.so.conf: it gets one that reads the drop-in directory
    assert container.path("/etc/ld.so.conf").read_text() == "include /etc/ld.so.conf.d/*.conf\n"


def test_an_existing_ld_so_conf_is_left_alone(container):
    container.path("/etc").mkdir()
    container.path("/etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n/usr/local/lib\n")
    assert container.hook("update-ldcache", "--ldconfig", LDCONFIG).returncode == 0
    assert container.path("/etc/ld.so.conf").read_text().endswith("/usr/local/lib\n")


def test_only_a_static_ldconfig_is_run(container, tmp_path):
    script = tmp_path / "ldconfig.sh"
    script.write_text("#!/bin/sh\ntouch /pwned\n")
    script.chmod(0o755)
    done = container.hook("update-ldcache", "--ldconfig", str(script), "--folder", "/usr/lib64")
    assert done.returncode == 1 and "not a 64-bit ELF" in done.stderr
    # a dynamic one would load the image's ld.so and libc as root
    done = container.hook("update-ldcache", "--ldconfig", shutil.which("true"), "--folder", "/usr/lib64")
    assert done.returncode == 1 and "dynamically linked" in done.stderr
    assert not container.path("/pwned").exists() and not container.path("/etc/ld.so.cache").exists()
