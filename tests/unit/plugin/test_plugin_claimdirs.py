"""ClaimDirs: new claims' directories under the run directory; those an older plugin made under
<plugin-dir>/claims found there (read at start and when another process's checkpoint is adopted), removed
from wherever they are."""

from __future__ import annotations

import os

from driver.plugin.claims.dirs import ClaimDirs, as_dirs


def test_a_new_claim_goes_under_the_run_dir_an_old_one_stays_where_it_was(tmp_path):
    run, old = tmp_path / "run" / "claims", tmp_path / "plugin" / "claims"
    (old / "u-old").mkdir(parents=True)
    dirs = ClaimDirs(run, legacy=old)
    assert dirs / "u-old" == old / "u-old"
    assert dirs / "u-new" == run / "u-new"


def test_a_symlink_or_file_in_the_old_place_is_no_claim_directory(tmp_path):
    run, old = tmp_path / "run" / "claims", tmp_path / "plugin" / "claims"
    old.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", old / "u-link")
    (old / "u-file").write_text("")
    dirs = ClaimDirs(run, legacy=old)
    assert dirs / "u-link" == run / "u-link" and dirs / "u-file" == run / "u-file"


def test_the_old_place_is_read_again_on_rescan_only(tmp_path):
    run, old = tmp_path / "run" / "claims", tmp_path / "plugin" / "claims"
    dirs = ClaimDirs(run, legacy=old)  # no old place at all: fine
    (old / "u-later").mkdir(parents=True)  # another (older) plugin process prepared it meanwhile
    assert dirs / "u-later" == run / "u-later"
    dirs.rescan()
    assert dirs / "u-later" == old / "u-later"


def test_remove_takes_the_directory_from_both_places_and_forgets_the_old_one(tmp_path):
    run, old = tmp_path / "run" / "claims", tmp_path / "plugin" / "claims"
    for top in (run, old):
        (top / "u" / "limits").mkdir(parents=True)
    (old / "keep").mkdir()
    dirs = ClaimDirs(run, legacy=old)
    assert sorted(dirs.uids()) == ["keep", "u"]
    dirs.remove("u")
    assert not (run / "u").exists() and not (old / "u").exists()
    assert dirs / "u" == run / "u" and dirs / "keep" == old / "keep"
    dirs.remove("never-there")  # idempotent


def test_one_place_when_the_run_dir_is_the_plugin_dir(tmp_path):
    dirs = ClaimDirs(tmp_path / "claims", legacy=tmp_path / "claims")
    assert dirs.legacy is None
    assert as_dirs(tmp_path / "claims") / "u" == tmp_path / "claims" / "u"
    assert as_dirs(dirs) is dirs
