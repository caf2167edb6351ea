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


# A line of code that ends in a /* ... */ comment: universalmutator makes no mutant of such a line at all
# (it skips lines holding a block comment; a // comment does not stop it), so 53 lines of native/src were
# never mutated. The runner hands it the file with those comments cut off and puts them back in each mutant.
_TRAILING_COMMENT = re.compile(r"^(?P<code>.*?\S)(?P<comment>[ \t]*/\*(?:(?!\*/).)*\*/[ \t]*)$")


def _trailing_comment(line: str) -> tuple[str, str]:
    """(code, comment) of a line of code ending in one /* ... */ comment; (line, "") for any other line,
    and for one whose code holds a quote or another comment, which only a C lexer could split safely."""
    m = _TRAILING_COMMENT.match(line)
    if not m or any(c in m["code"] for c in ("\"", "'", "/*", "*/", "//")):
        return line, ""
    return m["code"], m["comment"]


def c_mutants(path: str, lines: set[int] | None) -> Iterator[Mutant]:
    """universalmutator's C rules over the file (mutants written to a temporary directory, read back; the
    line and the change come from its log, which names the file each mutant went to), with the lines that
    end in a block comment given to it without the comment. The same text made by two rules is one
    mutant."""
    mutate = shutil.which("mutate", path=str(Path(sys.executable).parent)) or shutil.which("mutate")
    if not mutate:
        raise ConfigError("universalmutator's `mutate` not found: pip install universalmutator (make venv)")
    source = (config.ROOT / path).read_text()
    original = source.splitlines(keepends=True)
    comments: dict[int, str] = {}
    cut = []
    for n, line in enumerate(original, 1):
        body = line.rstrip("\n")
        code, comment = _trailing_comment(body)
        if comment:
            comments[n] = comment
        cut.append(code + line[len(body):])
    with tempfile.TemporaryDirectory(prefix="carve-mutants-") as tmp:
        given = Path(tmp) / "src" / Path(path).name
        given.parent.mkdir()
        given.write_text("".join(cut))
        cmd = [mutate, str(given), "c", "--noCheck", "--mutantDir", tmp]
        if lines is not None:
            (Path(tmp) / "lines.txt").write_text(" ".join(map(str, sorted(lines))))
            cmd += ["--lines", str(Path(tmp) / "lines.txt")]
        log = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True, timeout=300).stdout
        seen = set()
        for m in _UM_MUTANT.finditer(log):
            n, before, after = int(m[1]), m[2], m[3]
            if _only_spacing(before, after):
                continue
            # Its rules rewrite line n in place (some add a line after it: `break;`): what stands between
            # the given file's lines before n and after n is the mutated line, which gets its comment back.
            mutated = Path(m[4]).read_text(errors="replace")
            head, tail = "".join(cut[: n - 1]), "".join(cut[n:])
            if not (mutated.startswith(head) and mutated.endswith(tail)):
                continue  # not a change of line n alone
            middle = mutated[len(head) : len(mutated) - len(tail)]
            first, nl, rest = middle.partition("\n")
            comment = comments.get(n, "")
            text = "".join(original[: n - 1]) + first + comment + nl + rest + "".join(original[n:])
            if text == source or text in seen:
                continue
            seen.add(text)
            yield Mutant(path, n, "universalmutator", before + comment, after + comment, text)


def _only_spacing(before: str, after: str) -> bool:
    """A rule that swaps two identical arguments (`f(x, x)`) writes the line back with other spacing: the
    same program, not a mutant. Lines with a string literal are kept (spacing inside one is code)."""
    return '"' not in before and "".join(before.split()) == "".join(after.split())
