"""Whether a region tmpfs the plugin mounts reaches the container runtime (regionfs.py, host_sees_mounts):
yes when the plugin shares the node init's mount namespace (a plugin run on the host, or
the chart's hostPID), else only when the mount holding the claims directory propagates, which mountinfo says
with a `shared:<n>` optional field (a `master:<n>` alone is a slave mount: the plugin sees the host's mounts,
the host not the plugin's). The answer is kept per filesystem and mount namespace, since every region sits
under the one claims directory."""

from __future__ import annotations

import os

import pytest

from driver.plugin.container import regionfs
from driver.plugin.container.regionfs import host_sees_mounts


def _proc(tmp_path, same_namespace: bool):
    proc = tmp_path / "proc"
    (proc / "self/ns").mkdir(parents=True)
    (proc / "1/ns").mkdir(parents=True)
    (proc / "self/ns/mnt").write_text("")
    if same_namespace:
        os.link(proc / "self/ns/mnt", proc / "1/ns/mnt")  # one inode: one namespace
    else:
        (proc / "1/ns/mnt").write_text("")
    return proc


def _mountinfo(*optional: str, source: str = "/dev/sda1") -> list[str]:
    head = ["36", "35", "98:0", "/", "/var/lib/carve", "rw,noatime"]
    return [*head, *optional, "-", "ext4", source, "rw"]


def test_the_node_inits_mount_namespace_sees_every_mount(tmp_path, monkeypatch):
    monkeypatch.setattr(regionfs, "_mount_of", lambda _d: pytest.fail("mountinfo read in init's namespace"))
    assert host_sees_mounts(tmp_path, _proc(tmp_path, same_namespace=True)) is True


@pytest.mark.parametrize(
    ("optional", "seen"),
    [
        ((), False),  # private
        (("master:1",), False),  # slave: the host's mounts reach the plugin, not the other way
        (("shared:7",), True),
        (("shared:7", "master:1"), True),
        (("master:1", "shared:9"), True),
        (("propagate_from:2",), False),
    ],
)
def test_in_a_namespace_of_its_own_only_a_shared_mount_reaches_the_runtime(
    tmp_path, monkeypatch, optional, seen
):
    monkeypatch.setattr(regionfs, "_mount_of", lambda _d: _mountinfo(*optional))
    assert host_sees_mounts(tmp_path, _proc(tmp_path, same_namespace=False)) is seen


def test_a_proc_without_namespace_files_falls_back_to_mountinfo(tmp_path, monkeypatch):
    monkeypatch.setattr(regionfs, "_mount_of", lambda _d: _mountinfo("shared:3"))
    assert host_sees_mounts(tmp_path, tmp_path / "no-proc") is True
    # only the optional fields count, not a mount source that happens to read "shared:..."
    monkeypatch.setattr(regionfs, "_mount_of", lambda _d: _mountinfo(source="shared:1"))
    assert host_sees_mounts(tmp_path, tmp_path / "no-proc") is False
    monkeypatch.setattr(regionfs, "_mount_of", lambda _d: None)  # no mount holds it (never on Linux)
    assert host_sees_mounts(tmp_path, tmp_path / "no-proc") is False


def test_the_answer_is_kept_per_filesystem_of_the_claims_directory(tmp_path, monkeypatch):
    asked = []

    def sees(directory, proc=None):
        asked.append(directory)
        return True

    monkeypatch.setattr(regionfs, "host_sees_mounts", sees)
    monkeypatch.setattr(regionfs, "_SEES", {})
    claims = tmp_path / "claims"
    claims.mkdir()
    assert regionfs._host_sees_mounts_cached(claims / "a") is True
    assert regionfs._host_sees_mounts_cached(claims / "b") is True
    assert asked == [claims / "a"]  # the second region of the same directory is not asked again
    # a directory whose parent cannot be stat'ed is asked each time
    assert regionfs._host_sees_mounts_cached(tmp_path / "gone" / "c") is True
    assert asked[-1] == tmp_path / "gone" / "c"
