"""The compile-time worst-case cost of a selector (cel_cost.estimate), rule by rule, with operands long
enough that each rule's arithmetic gives its own figure: cel-go's traversal at 0.1 a character rounded
up, a regex at (text x 0.1) x (pattern x 0.25), a macro's body once per element. A tenant sees these
figures as the line between a selector the API server admits and one it refuses as too complex."""

from __future__ import annotations

import pytest

from driver.allocator import cel, cel_cost
from driver.allocator.cel_cost import Estimate

A = '"' + "a" * 37 + '"'  # traversal 4
B = '"' + "b" * 9 + '"'  # traversal 1, as a pattern ceil(9 x 0.25) = 3
C = '"' + "c" * 58 + '"'  # traversal 6


def _estimate(expression: str) -> Estimate:
    cel.compile_selector("true")  # the parser is made with the first environment
    return cel_cost.estimate(cel.cel_ast.reduce(cel._PARSER.parse(expression)))


@pytest.mark.parametrize(("expression", "expected"), [
    ("true", Estimate(1, 1)),
    ("7", Estimate(1, 1)),
    (A, Estimate(1, 37)),
    # a comparison traverses the shorter side: 1 + 1 + 1 + 4
    (f"{A} == {C}", Estimate(7)),
    (f"{C} == {A}", Estimate(7)),
    (f"{C} < {A}", Estimate(7)),
    # `in` a list: every element, each a traversal of the needle (3 x 4); the list itself costs 1 + 3
    (f'{A} in [{B}, {C}, "x"]', Estimate(1 + 1 + 4 + 3 * 4)),
    # an empty needle still costs a unit per element
    (f'"" in [{B}]', Estimate(1 + 1 + 2 + 1)),
    # both sides of a logical operator, and a negation's unit
    (f"({A} == {C}) && !({A} == {C})", Estimate(1 + 7 + 8)),
    (f"({A} == {C}) || !({A} == {C})", Estimate(1 + 7 + 8)),
    # the regex functions: base (1 + the operands' units), then text traversal x pattern factor
    (f"{A}.matches({B})", Estimate(3 + 4 * 3, 37)),
    (f"{A}.find({B})", Estimate(3 + 4 * 3, 37)),
    (f"{A}.findAll({B})", Estimate(3 + 4 * 3, 38, 37)),
    (f'{A}.matches("")', Estimate(3 + 4 * 1, 37)),  # an empty pattern counts as 1
    (f'{A}.matches("bbbbb")', Estimate(3 + 4 * 2, 37)),
    (f'{C}.matches({A})', Estimate(3 + 6 * 10, 58)),
    # replace: each character may become the replacement (its length; at least 1)
    (f'{A}.replace("a", {B})', Estimate(4 + 4 * 9, 37 * 9)),
    (f'{A}.replace("a", "")', Estimate(4 + 4 * 1, 37)),
    (f'{A}.replace("a", {B}, 2)', Estimate(5 + 4 * 9, 37 * 9)),
    (f'{A}.split(",")', Estimate(3 + 4, 38, 37)),
    (f'{A}.split(",", 3)', Estimate(4 + 4, 38, 37)),
    # join: traverses every element at its largest (2 x 58 characters: 12), builds at most
    # 2 x (58 + the separator's 9)
    (f"[{A}, {C}].join({B})", Estimate(5 + 12, 2 * (58 + 9))),
    (f"[{C}, {A}].join()", Estimate(4 + 12, 2 * (58 + 1))),
    (f"{C}.reverse()", Estimate(2 + 6, 58)),
    (f"{C}.lowerAscii()", Estimate(2 + 6, 58)),
    (f"{C}.trim()", Estimate(2 + 6, 58)),
    (f"{C}.substring(1, 2)", Estimate(4 + 6, 58)),
    (f"{C}.charAt(1)", Estimate(3 + 6, 58)),
    # a search traverses the text once per unit of the needle's traversal
    (f"{C}.indexOf({A})", Estimate(3 + 6 * 4)),
    (f"{C}.lastIndexOf({A})", Estimate(3 + 6 * 4)),
    (f"{C}.contains({A})", Estimate(3 + 6 * 4)),
    (f"{C}.startsWith({A})", Estimate(3 + 6 * 4)),
    (f'{C}.endsWith("")', Estimate(3 + 6 * 1)),
    (f'{C}.contains("x")', Estimate(3 + 6 * 1)),
    # the list functions and size: a unit per element or character
    (f"[{A}, {C}].size()", Estimate(4 + 2)),
    (f"size({C})", Estimate(2 + 58)),
    ("[4, 5, 6].sum()", Estimate(5 + 3)),
    ("[4, 5, 6].max()", Estimate(5 + 3)),
    ("[4, 5, 6].isSorted()", Estimate(5 + 3)),
    # anything else (quantity, conversions): constant work over its first operand
    (f"quantity({A})", Estimate(2 + 4, 37)),
    ('quantity("")', Estimate(2, 1)),
    (f"int({C})", Estimate(2 + 6, 58)),
    # macros: the target once, the body (and a unit) once per element
    ("[1, 2, 3].map(x, x + 1)", Estimate(1 + 4 + 3 * (4 + 1), 3, 65)),
    ("[1, 2, 3].filter(x, x > 0)", Estimate(1 + 4 + 3 * (4 + 1), 3, 1)),
    ("[1, 2, 3].all(x, x > 0)", Estimate(1 + 4 + 3 * (4 + 1), 1, 1)),
    ("[1, 2, 3].exists(x, x > 0)", Estimate(1 + 4 + 3 * (4 + 1), 1, 1)),
    ("[1, 2, 3].exists_one(x, x > 0)", Estimate(1 + 4 + 3 * (4 + 1), 1, 1)),
    # map's three-argument form is costed as a function of its operands
    ("[1, 2].map(x, x > 0, x)", Estimate(1 + 3 + 1 + 4 + 1 + 1, 2)),
    # the other nodes: their children, and a value as large as all of them
    (f"{A} + {C}", Estimate(1 + 2 + 1, 37 + 58)),
    (f"true ? {A} : {C}", Estimate(1 + 3, 1 + 37 + 58)),
    (f"[{A}, {C}][0]", Estimate(1 + 3 + 1, 3, 58)),
    ('{"a": 1}.a', Estimate(5, 2)),
])
def test_the_estimate_of_each_form(expression, expected):
    assert _estimate(expression) == expected


def test_the_estimate_decides_whether_a_selector_compiles():
    # a regex over a 64-character attribute with a long pattern: 7 x ceil(len x 0.25) a call; 300
    # such calls are over a million units with a pattern of 2,000 characters, and under with 4
    pattern = "x" * 2000
    name = 'device.attributes["gpu.carve.dev"].label'
    big = " || ".join([f'{name}.matches("{pattern}")'] * 3)
    assert _estimate(big).cost < cel_cost.MAX_COST  # 3 x 3,500 is well within
    wide = "b" * 1000
    over = f'{name}.replace("a", "{wide}").replace("b", "{wide}").matches("{pattern}")'
    with pytest.raises(cel.CelError, match=r"worst-case cost \d+ exceeds the limit of 1000000"):
        cel.compile_selector(over)


def test_the_time_backstop_stops_an_evaluation_past_its_seconds(monkeypatch):
    monkeypatch.setattr(cel_cost.Meter, "seconds", -1.0)
    cel_cost.Meter.start()
    with pytest.raises(cel_cost.CostLimitExceeded, match="took more than -1s"):
        cel_cost.Meter.charge(1)
    assert cel_cost.Meter.stop() == "CEL evaluation took more than -1s"
    assert cel_cost.Meter.last_reason() == "CEL evaluation took more than -1s"
