"""What a mutant is: a file, a line, the line before and after, and the whole mutated text."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the repository root
    line: int
    operator: str
    original_line: str
    mutated_line: str
    text: str = field(repr=False)  # the whole mutated file
    nth: int = 0  # Python: which of its operator's mutants of this line (the draw's key, draw.draw_key)

    def describe(self) -> str:
        change = f"{self.original_line.strip()!r} -> {self.mutated_line.strip()!r}"
        return f"{self.path}:{self.line}: [{self.operator}] {change}"
