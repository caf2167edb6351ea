"""An entry of a regions root with neither a region file nor a limits directory is no claim's, and the
limiter passes over it without a word (binding.c, add_claim). The plugin mounts an MPS claim's pipe
directory at /var/run/carve/mps, in the root every process scans: were it taken for a claim whose region
cannot be opened, every process of such a container would log an error at its start. An entry with a region
file the limiter cannot use is still logged (test_limiter_regions_root_scanned_once.py), as is a claim's
broken limits file.

The root here is CARVE_REGION_DIR, a directory of the test's; the environment's quota is the process's."""

from __future__ import annotations

from pathlib import Path

MIB = 1 << 20


def test_an_entry_of_no_claim_is_passed_over_in_silence(claim, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "mps").mkdir(parents=True)  # what an MPS claim's pipe directory looks like: no region, no limits
    (root / "mps" / "control").write_text("")
    c = claim()
    proc = c.run(
        "alloc", str(MIB), CARVE_REGION="", CARVE_REGION_DIR=str(root), CARVE_MEMORY_LIMIT=str(8 * MIB)
    )
    assert proc.stdout.strip() == "0", proc.stderr
    assert str(root / "mps") not in proc.stderr, proc.stderr


def test_an_entry_with_a_region_it_cannot_use_is_still_logged(claim, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "broken").mkdir(parents=True)
    (root / "broken" / "region").write_text("")
    c = claim()
    proc = c.run(
        "alloc", str(MIB), CARVE_REGION="", CARVE_REGION_DIR=str(root), CARVE_MEMORY_LIMIT=str(8 * MIB)
    )
    assert f"region {root / 'broken' / 'region'}: file size does not match" in proc.stderr, proc.stderr
