"""The MIG capability nodes a container of a MIG claim gets (driver/plugin/mig/caps.py), read from the kernel
driver's files under the proc root as the driver writes them: the nvidia-caps major only from the character
devices section, each access file's minor and decimal mode (0o666 where the driver gives none), and a file
that is missing, unreadable or out of range refused with its path named (the prepare then fails saying
which file, instead of giving the container a wrong device node)."""

from __future__ import annotations

import pytest

from driver.plugin.mig.caps import MigCapsError, access_paths, caps_major, mig_cap_nodes

DEVICES = """Character devices:
  1 mem
195 nvidia
236 nvidia-uvm
238 nvidia-caps

Block devices:
  8 sd
239 nvidia-caps
"""


def _proc(
    tmp_path, devices=DEVICES, gi="DeviceFileMinor: 30\nDeviceFileMode: 292\n", ci="DeviceFileMinor: 31\n"
):
    (tmp_path / "devices").write_text(devices)
    gi_path, ci_path = access_paths(tmp_path, 0, 3, 0)
    ci_path.parent.mkdir(parents=True)
    if gi is not None:
        gi_path.write_text(gi)
    if ci is not None:
        ci_path.write_text(ci)
    return tmp_path


def test_the_nodes_carry_the_caps_major_and_each_files_minor_and_mode(tmp_path):
    gi, ci = mig_cap_nodes(_proc(tmp_path), 0, 3, 0)
    assert (gi.path, gi.type, gi.major, gi.minor, gi.file_mode) == (
        "/dev/nvidia-caps/nvidia-cap30",
        "c",
        238,
        30,
        0o444,
    )
    assert (ci.path, ci.major, ci.minor, ci.file_mode) == ("/dev/nvidia-caps/nvidia-cap31", 238, 31, 0o666)


def test_the_major_is_taken_only_from_the_character_devices(tmp_path):
    block_only = "Character devices:\n  1 mem\n\nBlock devices:\n239 nvidia-caps\n"
    (tmp_path / "devices").write_text(block_only)
    with pytest.raises(MigCapsError, match=r"devices: no 'nvidia-caps' among the character devices"):
        caps_major(tmp_path)
    (tmp_path / "devices").write_text(
        "Character devices:\n238 nvidia-caps-imex\nx nvidia-caps\n240 nvidia-caps\n"
    )
    assert caps_major(tmp_path) == 240


def test_a_missing_devices_file_names_it(tmp_path):
    with pytest.raises(MigCapsError) as e:
        caps_major(tmp_path)
    assert str(e.value) == f"{tmp_path / 'devices'}: No such file or directory"


@pytest.mark.parametrize(
    ("gi", "why"),
    [
        (None, "No such file or directory"),
        ("DeviceFileMode: 438\n", "no DeviceFileMinor: <number> line"),
        ("DeviceFileMinor: x\n", "no DeviceFileMinor: <number> line"),
        ("DeviceFileMinor: 30\nDeviceFileMode: rw\n", "no DeviceFileMinor: <number> line"),
        ("DeviceFileMinor: -1\n", "DeviceFileMinor -1 / DeviceFileMode 438 out of range"),
        (
            "DeviceFileMinor: 30\nDeviceFileMode: 4096\n",
            "DeviceFileMinor 30 / DeviceFileMode 4096 out of range",
        ),
        ("DeviceFileMinor: 30\nDeviceFileMode: -1\n", "DeviceFileMinor 30 / DeviceFileMode -1 out of range"),
    ],
)
def test_an_access_file_that_does_not_give_a_node_is_refused_naming_it(tmp_path, gi, why):
    proc = _proc(tmp_path, gi=gi)
    with pytest.raises(MigCapsError) as e:
        mig_cap_nodes(proc, 0, 3, 0)
    assert str(e.value) == f"{access_paths(proc, 0, 3, 0)[0]}: {why}"


def test_the_widest_and_narrowest_modes_and_minor_zero_are_taken(tmp_path):
    proc = _proc(
        tmp_path,
        gi="DeviceFileMinor: 0\nDeviceFileMode: 4095\nother line\n",
        ci="DeviceFileMinor: 1\nDeviceFileMode: 0\n",
    )
    gi, ci = mig_cap_nodes(proc, 0, 3, 0)
    assert (gi.minor, gi.file_mode, ci.minor, ci.file_mode) == (0, 0o7777, 1, 0)
