"""The limiter's part of a claim's container edits (container/edits.py, limiter_edits): the region
file read-write and the limits directory read-only next to it, at the region path the claim's containers
see, and CARVE_LIMITS_SOURCE naming the claims directory's mount (the limiter's trust anchor); a region path
outside a directory named like the claims directory is refused (the limiter would not recognise the mount),
and a claims directory whose mount cannot be found gives edits without the anchor and a warning, not a failed
prepare (the limiter then trusts no limits file, the tightest of the others holds)."""

from __future__ import annotations

import logging
import os

import pytest

from driver import names
from driver.limits import ClaimLimits, DeviceLimit
from driver.limits.mounts import MountError, limits_source
from driver.plugin.container import edits as edits_module
from driver.plugin.container.edits import ClaimFiles, limiter_edits, region_container_path


def _files(tmp_path):
    files = ClaimFiles(tmp_path / "claims" / "uid-1")
    files.limits_dir.mkdir(parents=True)
    return files


def _limits(region_path):
    return ClaimLimits((DeviceLimit(1 << 30, 30, "GPU-1"),), region_path)


def test_the_edits_mount_the_region_and_limits_and_name_the_claims_directorys_mount(tmp_path):
    files = _files(tmp_path)
    got = limiter_edits(files, tmp_path / "lib", _limits(region_container_path("uid-1")))
    mounts = {m.container_path: (m.host_path, m.options) for m in got.mounts}
    assert mounts["/var/run/carve/uid-1/region"][0] == str(files.region)
    assert mounts["/var/run/carve/uid-1/region"][1][0] == "rw"
    assert mounts["/var/run/carve/uid-1/limits"] == (
        str(files.limits_dir),
        ("ro", "nosuid", "nodev", "noexec", "bind"),
    )
    assert f"{names.ENV_LIMITS_SOURCE}={limits_source(tmp_path / 'claims')}" in got.env


def test_the_anchor_is_a_read_only_file_of_the_claim_mounted_beside_the_limiter(tmp_path):
    # the limiter reads the anchor from this file, not from the variable a process can change for its children
    files = _files(tmp_path)
    got = limiter_edits(files, tmp_path / "lib", _limits(region_container_path("uid-1")))
    mounts = {m.container_path: (m.host_path, m.options) for m in got.mounts}
    assert mounts[names.LIMITS_SOURCE_CONTAINER_PATH] == (
        str(files.root / "limits-source"),
        ("ro", "nosuid", "nodev", "noexec", "bind"),
    )
    assert names.LIMITS_SOURCE_CONTAINER_PATH == "/usr/local/carve/lib/limits-source"  # limits.c's path
    assert (files.root / "limits-source").read_text() == limits_source(tmp_path / "claims") + "\n"
    assert (files.root / "limits-source").stat().st_mode & 0o777 == 0o444


def test_a_region_path_outside_a_directory_named_like_the_claim_is_refused(tmp_path):
    files = _files(tmp_path)
    with pytest.raises(ValueError) as e:
        limiter_edits(files, tmp_path / "lib", _limits("/var/run/carve/other/region"))
    assert str(e.value) == "limiter_edits: /var/run/carve/other/region is not under a directory named uid-1"


def test_a_claims_directory_whose_mount_is_unknown_gives_edits_without_the_anchor(
    tmp_path, monkeypatch, caplog
):
    def unknown(claims_dir):
        raise MountError(f"/proc/self/mountinfo: no mount holds {claims_dir}")

    monkeypatch.setattr(edits_module, "limits_source", unknown)
    monkeypatch.setattr(edits_module, "_LIMITS_SOURCES", {})
    files = _files(tmp_path)
    with caplog.at_level(logging.WARNING):
        got = limiter_edits(files, tmp_path / "lib", _limits(region_container_path("uid-1")))
    assert not [e for e in got.env if e.startswith(f"{names.ENV_LIMITS_SOURCE}=")]
    assert len(got.mounts) == 3 and got.hooks  # the limiter still goes in; no anchor file to mount
    assert not (files.root / "limits-source").exists()
    (r,) = [r for r in caplog.records if r.getMessage() == "limits.source-unknown"]
    assert r.fields["claims_dir"] == str(tmp_path / "claims")
    assert r.fields["error"] == f"/proc/self/mountinfo: no mount holds {tmp_path / 'claims'}"


def test_the_anchor_is_remembered_per_directory_and_asked_again_on_another_filesystem(tmp_path, monkeypatch):
    asked = []

    def source(claims_dir):
        asked.append(claims_dir)
        return f"0:{len(asked)}:/"

    monkeypatch.setattr(edits_module, "limits_source", source)
    monkeypatch.setattr(edits_module, "_LIMITS_SOURCES", {})
    claims = tmp_path / "claims"
    claims.mkdir()
    assert edits_module._limits_source(claims) == "0:1:/"
    assert edits_module._limits_source(claims) == "0:1:/"  # remembered
    os.rename(claims, tmp_path / "old")  # kept: the new directory cannot reuse its inode
    claims.mkdir()  # a new directory at the path: another inode, asked again
    assert edits_module._limits_source(claims) == "0:2:/"
    assert edits_module._limits_source(tmp_path / "not-yet") == "0:3:/"  # not there: asked, not kept
    assert edits_module._limits_source(tmp_path / "not-yet") == "0:4:/"
