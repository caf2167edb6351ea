"""The MIG journal keeps one entry per (GPU, placement start): `intend` for a placement replaces whatever
entry that placement had (a claim whose creation failed there, whose entry recovery would otherwise
destroy the new claim's instance for), and keeps the entries of the GPU's other placements and of other
GPUs. The journal is read back from its file, so the UUIDs it compares are equal strings, not the same
objects."""

from __future__ import annotations

from pathlib import Path

from driver.plugin.mig.journal import MigJournal


def test_intend_replaces_only_the_entry_of_its_own_gpu_and_placement(tmp_path: Path) -> None:
    journal = MigJournal(tmp_path / "mig-journal.json")
    # Around (GPU-1, 4): the same start on GPUs whose UUIDs sort below and above, lower and higher starts
    # on the same GPU.
    for gpu, start in (("GPU-0", 4), ("GPU-1", 0), ("GPU-1", 4), ("GPU-1", 6), ("GPU-2", 4)):
        journal.intend("claim-a", gpu, "1g.10gb", start)
    journal.intend("claim-b", "".join(["GPU-", "1"]), "1g.10gb", 4)  # a UUID built at run time, as NVML's
    got = sorted((e.gpu_uuid, e.start, e.claim) for e in journal.entries())
    assert got == [
        ("GPU-0", 4, "claim-a"),
        ("GPU-1", 0, "claim-a"),
        ("GPU-1", 4, "claim-b"),
        ("GPU-1", 6, "claim-a"),
        ("GPU-2", 4, "claim-a"),
    ]
