"""The draw: which mutants run, in which order. Each mutant's place is a hash of the seed and of the mutant
itself, so a run on the same tree draws the same sample, and files are interleaved so that a short budget
still samples each of them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping

from .config import Owner, Package
from .cosmic import python_mutants
from .mutant import Mutant
from .universal import c_mutants

Drawn = tuple[Mutant, Package, Owner]


def draw_key(seed: str, m: Mutant) -> str:
    """Where a mutant falls in the draw: a hash of the seed and of what the mutant is (its file, the line's
    text, the operator and, for C, the mutated line), not of its position among the others. So a mutant
    keeps its place when other code changes or a test is added: a survivor CI drew is drawn again until a
    test kills it or hack/mutants_allowed.yaml lists it, and a run on the same tree draws the same sample.
    (Python mutants are made when drawn, so the operator and which of its mutants of the line it is stand
    in for the mutated text.)"""
    # Python operators are `name#occurrence`; a C mutant's is `universalmutator`, without `#`, and its
    # mutated line tells it from the line's other mutants (keyed on the name, they all drew together).
    name, sep, _ = m.operator.rpartition("#")
    what = f"{name}#{m.nth}" if sep else m.mutated_line.strip()
    return hashlib.sha256(f"{seed}\0{m.path}\0{m.original_line.strip()}\0{what}".encode()).hexdigest()


def mutants_of(path: str, lines: set[int] | None) -> Iterator[Mutant]:
    """The generator's mutants of a file (Python: cosmic-ray, C: universalmutator), on `lines` or all."""
    if path.endswith(".py"):
        yield from python_mutants(path, lines)
    elif path.endswith((".c", ".h")):
        yield from c_mutants(path, lines)


def interleave(queue: list[Drawn]) -> list[Drawn]:
    """The queue with its files taken in turn (each file's own order kept)."""
    by_file: dict[str, list[Drawn]] = {}
    for item in queue:
        by_file.setdefault(item[0].path, []).append(item)
    out = []
    lists = list(by_file.values())
    while any(lists):
        for lst in lists:
            if lst:
                out.append(lst.pop(0))
    return out


def draw(packages: list[Package], wanted: Mapping[str, set[int] | None], seed: str,
         ) -> tuple[list[Drawn], dict[str, int]]:
    """Every mutant of the wanted files (and lines) with its package and owner, in draw order, and how many
    each package generated. Raises ConfigError or subprocess errors from the generators."""
    queue: list[Drawn] = []
    generated: dict[str, int] = {}
    for pkg in packages:
        mine = []
        for f in sorted(wanted):
            owner = pkg.owner_of(f)
            if owner is None:
                continue
            mine += [(m, pkg, owner) for m in mutants_of(f, wanted[f])]
        generated[pkg.name] = len(mine)
        queue += sorted(mine, key=lambda item: draw_key(seed, item[0]))
    return interleave(queue), generated
