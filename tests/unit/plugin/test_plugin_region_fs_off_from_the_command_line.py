"""`carve plugin --region-fs off` writes a claim's region into the plugin directory's own filesystem, no
tmpfs mounted for it; `auto` asks for one where the runtime will see it, `on` insists. The value comes from
the command line, a string of its own, not the literal the code compares it with: it is compared by value."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from driver import names
from driver.limits import ClaimLimits, DeviceLimit
from driver.plugin import command
from driver.plugin.container import regionfs
from driver.plugin.container.claimfiles import write_claim_files
from driver.plugin.container.edits import ClaimFiles

LIMITS = ClaimLimits(devices=(DeviceLimit(1024**3, 30, uuid="GPU-A"),), region_path="/var/run/carve/u/region")


@pytest.mark.parametrize(("flag", "caps"), [("off", []), ("auto", [False]), ("on", [True])])
def test_the_region_fs_flag_decides_whether_a_tmpfs_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, caps: list[bool]
) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    # The flag's value as argv holds it: built at run time, not the module's own "off".
    argv = ["--region-fs", "".join(flag)]
    args, _rest = parser.parse_known_args(argv)
    assert args.region_fs == flag
    asked: list[bool] = []
    monkeypatch.setattr(regionfs, "cap", lambda directory, force=False: asked.append(force) or True)
    limiter = tmp_path / "limiter"
    limiter.mkdir()
    (limiter / names.LIMITER_LIBRARY).write_bytes(b"\0")
    (limiter / names.HOOK_BINARY).write_bytes(b"\0")
    files = ClaimFiles(tmp_path / "claims" / "u")
    write_claim_files(files, limiter, LIMITS, region_fs=args.region_fs)
    assert asked == caps
    assert files.region.exists()
