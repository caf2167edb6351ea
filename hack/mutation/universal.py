"""The C mutants: universalmutator's C rules over a file (`mutate FILE c --noCheck`), each mutant read back
from the temporary directory its log names."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from . import config
from .config import ConfigError
from .mutant import Mutant

_UM_MUTANT = re.compile(
    r"PROCESSING MUTANT: (\d+): (.*?)  ==>  (.*?)\.\.\.VALID \[written to (.*?)\]", re.DOTALL
)


def c_mutants(path: str, lines: set[int] | None) -> Iterator[Mutant]:
    """universalmutator's C rules over the file (mutants written to a temporary directory, read back; the
    line and the change come from its log, which names the file each mutant went to). The same text made
    by two rules is one mutant."""
    mutate = shutil.which("mutate", path=str(Path(sys.executable).parent)) or shutil.which("mutate")
    if not mutate:
        raise ConfigError("universalmutator's `mutate` not found: pip install universalmutator (make venv)")
    source = (config.ROOT / path).read_text()
    with tempfile.TemporaryDirectory(prefix="carve-mutants-") as tmp:
        cmd = [mutate, str(config.ROOT / path), "c", "--noCheck", "--mutantDir", tmp]
        if lines is not None:
            (Path(tmp) / "lines.txt").write_text(" ".join(map(str, sorted(lines))))
            cmd += ["--lines", str(Path(tmp) / "lines.txt")]
        log = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True, timeout=300).stdout
        seen = set()
        for m in _UM_MUTANT.finditer(log):
            text = Path(m[4]).read_text(errors="replace")
            if text == source or text in seen or _only_spacing(m[2], m[3]):
                continue
            seen.add(text)
            yield Mutant(path, int(m[1]), "universalmutator", m[2], m[3], text)


def _only_spacing(before: str, after: str) -> bool:
    """A rule that swaps two identical arguments (`f(x, x)`) writes the line back with other spacing: the
    same program, not a mutant. Lines with a string literal are kept (spacing inside one is code)."""
    return '"' not in before and "".join(before.split()) == "".join(after.split())
