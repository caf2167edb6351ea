"""The Python mutants: cosmic-ray's operators over a file's parso tree, used as a library. Positions are
enumerated cheaply; the mutated text (a parse per mutant) is made only when a mutant is drawn."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator

from . import config
from .mutant import Mutant

# Operators whose mutants are not bugs a test can catch in this code base, with why:
SKIPPED_OPERATORS = {
    # decorators here are @dataclass/@property/@staticmethod/@classmethod/@contextmanager: removing one
    # breaks the import or every caller at once (killed by any test), never a plausible single-point bug
    "core/RemoveDecorator",
    # inserts a variable into an unrelated expression: mostly NameErrors at import, not bugs
    "core/VariableInserter",
}


def python_mutants(path: str, lines: set[int] | None) -> Iterator[Mutant]:
    """cosmic-ray's operators over the file's parso tree, one mutant per (operator, occurrence), without
    their text (materialize makes it)."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast

    source = (config.ROOT / path).read_text()
    original = source.splitlines()
    tree = get_ast(source)
    for name in sorted(cosmic_ray.plugins.operator_names()):
        if name in SKIPPED_OPERATORS:
            continue
        cls = cosmic_ray.plugins.get_operator(name)
        if cls.arguments():  # operators that need arguments (none by default in cosmic-ray's set)
            continue
        operator = cls()
        positions = [start for node in ast_nodes(tree) for start, _ in operator.mutation_positions(node)]
        on_line: dict[int, int] = {}
        for occurrence, (line, _col) in enumerate(positions):
            nth = on_line[line] = on_line.get(line, -1) + 1
            if lines is not None and line not in lines:
                continue
            yield Mutant(path, line, f"{name}#{occurrence}",
                         original[line - 1] if line <= len(original) else "", "", "", nth)


def _without_annotations(code: str) -> str | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
    return ast.dump(tree)


def only_annotations_differ(source: str, text: str) -> bool:
    """A mutant of a type annotation only: equivalent (the code base postpones their evaluation, PEP 563;
    they are the type checker's, not behaviour), so never drawn."""
    stripped = _without_annotations(text)
    return stripped is not None and stripped == _without_annotations(source)


def materialize(m: Mutant) -> Mutant | None:
    """The mutant with its text (Python mutants are made when drawn); None when the operator changes
    nothing there."""
    if m.text:
        return m
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    name, _, occurrence = m.operator.rpartition("#")
    source = (config.ROOT / m.path).read_text()
    try:
        text = mutate_code(source, cosmic_ray.plugins.get_operator(name)(), int(occurrence))
    except Exception as e:  # an operator that fails on a node shape (cosmic-ray 8.7's ExceptionReplacer
        # on a dotted exception name): no mutant there, said once per mutant, the run goes on
        print(f"mutate: {m.path}:{m.line}: {name} could not mutate ({type(e).__name__}: {e}); skipped",
              file=sys.stderr)
        return None
    if text is None or text == source or only_annotations_differ(source, text):
        return None
    mutated = text.splitlines()
    line = mutated[m.line - 1] if m.line <= len(mutated) else ""
    return Mutant(m.path, m.line, name.removeprefix("core/"), m.original_line, line, text, m.nth)
