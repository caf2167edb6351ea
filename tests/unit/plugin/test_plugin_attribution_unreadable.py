"""Whose a GPU process is, when the node's word on it is missing or odd: a pid whose cgroup file is gone (the
process exited between NVML's answer and the read), is a link (a fake /proc must not redirect the plugin,
which runs as root), or names a kubepods cgroup with no pod under it belongs to no pod, so it is reported,
never given to a claim; a cgroup line that is not `<id>:<controllers>:<path>` is skipped; and a kill whose
cgroup cannot be read right before the signal is refused, naming why (docs/enforcement.md: a process is
killed only when its cgroup, read at that moment, names one of the claim's pods)."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest
from support.cgroups import cgroup_text, pod_uid, write_cgroup

from driver.plugin.enforcement.attribution import (
    AttributionError,
    pidfd_kill,
    pod_of_process,
    pod_uid_of_cgroup,
    pod_uid_of_path,
    pods_of_processes,
    read_cgroup,
)

POD_A = pod_uid(1)


def test_a_kubepods_cgroup_without_a_pod_segment_names_no_pod():
    assert pod_uid_of_path("/kubepods.slice/kubepods-burstable.slice") is None
    assert pod_uid_of_path("/kubepods/besteffort/not-a-pod/c") is None
    # the pod segment after the kubepods one counts even several levels down
    assert pod_uid_of_path(f"/kubepods/besteffort/x/pod{POD_A}/c") == POD_A
    assert pod_uid_of_path(f"/kubepods/pod{POD_A.upper()}/c") == POD_A


def test_cgroup_lines_that_are_not_three_fields_are_skipped():
    text = f"garbage\n0:/kubepods/pod{pod_uid(2)}/c\n" + cgroup_text(POD_A, "cgroupfs-v1")
    assert pod_uid_of_cgroup(text) == POD_A
    assert pod_uid_of_cgroup("no colons at all\n") is None


def test_the_pods_of_processes_with_a_missing_or_linked_cgroup_are_none(tmp_path):
    write_cgroup(tmp_path, 10, POD_A)
    write_cgroup(tmp_path, 12, None)
    (tmp_path / "11").mkdir()  # the process exited: its directory is going, no cgroup file
    (tmp_path / "13").mkdir()
    (tmp_path / "13" / "cgroup").symlink_to(tmp_path / "10" / "cgroup")  # a link to pod A's
    assert pods_of_processes([10, 11, 12, 13, 14, 10], tmp_path) == {
        10: POD_A,
        11: None,
        12: None,
        13: None,
        14: None,
    }
    assert pod_of_process(10, tmp_path) == POD_A


@pytest.mark.parametrize("pid", [11, 13])
def test_an_unreadable_cgroup_is_an_attribution_error_naming_the_pid(tmp_path, pid):
    write_cgroup(tmp_path, 10, POD_A)
    (tmp_path / "13").mkdir()
    (tmp_path / "13" / "cgroup").symlink_to(tmp_path / "10" / "cgroup")
    with pytest.raises(AttributionError, match=rf"^pid {pid}: cannot read its cgroup: "):
        read_cgroup(pid, tmp_path)


def test_read_cgroup_reads_at_most_its_bound(tmp_path, monkeypatch):
    from driver.plugin.enforcement import attribution

    write_cgroup(tmp_path, 10, POD_A)
    monkeypatch.setattr(attribution, "MAX_CGROUP_BYTES", 5)
    assert read_cgroup(10, tmp_path) == cgroup_text(POD_A)[:5]


def test_a_kill_whose_cgroup_cannot_be_read_is_refused_and_signals_nothing(tmp_path):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / str(victim.pid)).mkdir()  # a fake /proc with no cgroup file for it
        with pytest.raises(PermissionError) as e:
            pidfd_kill(victim.pid, {POD_A}, tmp_path)
        assert e.value.errno == errno.EPERM
        assert (
            str(e.value.strerror)
            == f"not killed: pid {victim.pid}: cannot read its cgroup: No such file or directory"
        )
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_a_kill_of_a_process_in_no_pod_says_so(tmp_path):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_cgroup(tmp_path, victim.pid, None)
        with pytest.raises(PermissionError, match=r"is in pod \(none\), not one of the claim's pods"):
            pidfd_kill(victim.pid, {POD_A}, tmp_path)
        assert victim.poll() is None
        write_cgroup(tmp_path, victim.pid, POD_A)
        pidfd_kill(victim.pid, {POD_A}, tmp_path)
        assert victim.wait(timeout=5) == -9
    finally:
        victim.kill()
        victim.wait()
