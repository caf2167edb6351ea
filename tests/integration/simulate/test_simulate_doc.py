"""docs/simulate.md shows the real output of `carve simulate` on the example files: every `$ carve simulate`
line of its "Reading the output" block is run and must print exactly the lines below it.

After a change to the simulator, regenerate the block with
`.venv/bin/python tests/integration/simulate/test_simulate_doc.py --update`.
"""

from __future__ import annotations

import contextlib
import io
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "simulate.md"
SECTION = "## Reading the output"


def example_block(text: str) -> tuple[int, int]:
    """(start, end) line indexes of the code fence's content in the section."""
    lines = text.splitlines()
    at = lines.index(SECTION)
    start = next(i for i in range(at, len(lines)) if lines[i] == "```") + 1
    end = next(i for i in range(start, len(lines)) if lines[i] == "```")
    return start, end


def commands(block: list[str]) -> list[tuple[str, list[str]]]:
    """(command line, its documented output lines) for each `$ ` line."""
    out: list[tuple[str, list[str]]] = []
    for line in block:
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return [(cmd, _trim(lines)) for cmd, lines in out]


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def run(command: str) -> list[str]:
    from driver.cli import main

    argv = shlex.split(command)
    assert argv[0] == "carve", command
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv[1:]) == 0, command
    return _trim(out.getvalue().splitlines())


def test_the_documented_output_is_what_the_code_prints(monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    text = DOC.read_text()
    start, end = example_block(text)
    found = commands(text.splitlines()[start:end])
    assert len(found) >= 2, "the example block lost its commands"
    for command, documented in found:
        assert documented == run(command), f"docs/simulate.md is stale for `{command}`: run with --update"


def update() -> None:
    text = DOC.read_text()
    lines = text.splitlines()
    start, end = example_block(text)
    block: list[str] = []
    for command, _ in commands(lines[start:end]):
        block += [f"$ {command}", *run(command), ""]
    DOC.write_text("\n".join([*lines[:start], *block[:-1], *lines[end:]]) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    if sys.argv[1:] == ["--update"]:
        import os

        os.chdir(REPO)
        update()
