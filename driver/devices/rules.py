"""Strategy rules: which strategy each GPU of a node runs, from `--strategy` / the node annotation. Pure.

Grammar (the value of `--strategy`, CARVE_STRATEGY, chart `plugin.strategy` / `plugin.strategyRules`, and
the Node annotation `gpu.carve.dev/strategy`): comma-separated items, each either

    <selector>=<strategy>    a rule for the GPUs the selector matches
    <strategy>               the default for every GPU no rule matches (at most one)

A selector is a GPU index (`0`) or a glob (`*A100*`, `T4`, `H200*`; fnmatch's `*`, `?`, `[...]`, matched
case-sensitively) on the GPU's product name as NVML reports it (`NVIDIA A100-SXM4-80GB`, `Tesla T4`) or on
its model key (`A100-80GB`, `T4`: the key `--gpus fake:...` uses, known for the catalog's models). Rules
are tried in the order written; the first that matches wins, the default comes last whatever its place.
A GPU neither matched nor defaulted runs `exclusive`.

A rule with a selector is the admin naming that GPU: its strategy is *pinned* (the strategy controller never
changes it). The bare default is left to the controller. A malformed item is an error naming the item and
the bad token (RuleError); a selector that matches no GPU of the node is only a warning (`unmatched`), since
one chart value serves every node of a mixed cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from driver import names
from driver.devices.base import ModelError
from driver.devices.catalog import key_for_product
from driver.gpu.model import Gpu

STRATEGY_NAMES = (
    names.STRATEGY_EXCLUSIVE,
    names.STRATEGY_SOFT,
    names.STRATEGY_SLOTS,
    names.STRATEGY_MIG,
    names.STRATEGY_TIMESLICE,
    names.STRATEGY_MPS,
)
BUILTIN_DEFAULT = names.STRATEGY_EXCLUSIVE
# Product names are letters, digits, spaces and -_.(); a glob adds *?[]!. Anything else is a typo.
_SELECTOR = re.compile(r"^[A-Za-z0-9 ._()*?\[\]!/+-]{1,128}$")
MAX_RULES = 64

# Who set a GPU's strategy (NodePartitioning status `gpus[].source`).
SOURCE_PINNED = (
    "pinned"  # the admin: a rule naming the GPU, the node annotation, a pinned NodePartitioning entry
)
SOURCE_CONTROLLER = "controller"  # the strategy controller's NodePartitioning entry
SOURCE_FALLBACK = "fallback"  # the GPU cannot run what it was given: --fallback-strategy
SOURCE_DEFAULT = "default"  # the bare default of the rules (or exclusive): left to the controller
SOURCES = (SOURCE_PINNED, SOURCE_CONTROLLER, SOURCE_FALLBACK, SOURCE_DEFAULT)


class RuleError(ModelError):
    """A strategy rule that cannot be parsed; the message names the whole value, the item and the token."""


@dataclass(frozen=True)
class Rule:
    selector: str | None  # None: the bare default
    strategy: str
    text: str  # the item as written, for logs, Events and status

    @property
    def index(self) -> int | None:
        return int(self.selector) if self.selector is not None and self.selector.isdigit() else None

    def matches(self, gpu: Gpu) -> bool:
        if self.selector is None:
            return True
        if self.index is not None:
            return gpu.index == self.index
        key = key_for_product(gpu.product)
        return fnmatchcase(gpu.product, self.selector) or (
            key is not None and fnmatchcase(key, self.selector)
        )


@dataclass(frozen=True)
class Choice:
    """One GPU's strategy under the rules, and the rule that gave it ("" for the built-in default)."""

    strategy: str
    rule: str
    pinned: bool  # a rule with a selector (or any rule of the node annotation) gave it


@dataclass(frozen=True)
class StrategyRules:
    rules: tuple[Rule, ...]  # with a selector, in order
    default: Rule | None
    text: str
    pin_default: bool = False  # the node annotation: its default is the admin's word for this node too

    def choose(self, gpu: Gpu) -> Choice | None:
        """The first matching rule's strategy, else the default; None when neither applies."""
        for rule in self.rules:
            if rule.matches(gpu):
                return Choice(rule.strategy, rule.text, True)
        if self.default is not None:
            return Choice(self.default.strategy, self.default.text, self.pin_default)
        return None

    def unmatched(self, gpus: Iterable[Gpu]) -> list[str]:
        """Rules that match no GPU of these (a warning: the value may be meant for other nodes)."""
        gpus = list(gpus)
        return [r.text for r in self.rules if not any(r.matches(g) for g in gpus)]

    def shadowed(self, gpus: Iterable[Gpu]) -> list[str]:
        """Rules that match GPUs only an earlier rule already took (first match wins)."""
        gpus = list(gpus)
        out = []
        for i, rule in enumerate(self.rules):
            mine = [g for g in gpus if rule.matches(g)]
            if mine and all(any(r.matches(g) for r in self.rules[:i]) for g in mine):
                out.append(rule.text)
        return out


def parse_rules(text: str, where: str = "--strategy", pin_default: bool = False) -> StrategyRules:
    """Parse a rules value; RuleError names `where`, the item and the token at fault."""
    items = [t.strip() for t in (text or "").split(",")]
    if not any(items):
        raise RuleError(f"{where} {text!r} is empty; e.g. 'soft', '0=mig,1=soft' or '*A100*=mig,soft'")
    if len(items) > MAX_RULES:
        raise RuleError(f"{where} {text!r}: {len(items)} items, at most {MAX_RULES}")
    rules: list[Rule] = []
    default: Rule | None = None
    seen: set[str] = set()
    for item in items:
        if not item:
            raise RuleError(f"{where} {text!r}: empty item (two commas in a row, or a trailing comma)")
        selector, sep, value = (s.strip() for s in item.partition("="))
        if not sep:
            if selector not in STRATEGY_NAMES:
                raise RuleError(
                    f"{where} {text!r}: {item!r}: unknown strategy {selector!r}; one of "
                    f"{', '.join(sorted(STRATEGY_NAMES))}, or <selector>=<strategy>"
                )
            if default is not None:
                raise RuleError(f"{where} {text!r}: {item!r}: a second default strategy ({default.text!r})")
            default = Rule(None, selector, item)
            continue
        if not selector:
            raise RuleError(f"{where} {text!r}: {item!r}: no selector before '='")
        if not _SELECTOR.match(selector):
            raise RuleError(
                f"{where} {text!r}: {item!r}: selector {selector!r} is neither a GPU index nor a glob on a "
                "product name or model key (letters, digits, space, ._()/+- and the glob characters *?[]!)"
            )
        if "=" in value:
            raise RuleError(f"{where} {text!r}: {item!r}: a second '=' (items are separated by commas)")
        if value not in STRATEGY_NAMES:
            raise RuleError(
                f"{where} {text!r}: {item!r}: unknown strategy {value!r}; one of "
                f"{', '.join(sorted(STRATEGY_NAMES))}"
            )
        key = str(int(selector)) if selector.isdigit() else selector
        if key in seen:
            what = f"GPU {key}" if selector.isdigit() else f"selector {selector!r}"
            raise RuleError(f"{where} {text!r}: {item!r}: {what} named twice")
        seen.add(key)
        rules.append(Rule(key, value, item))
    return StrategyRules(tuple(rules), default, text, pin_default)


@dataclass(frozen=True)
class Resolved:
    """One GPU's strategy on this node, before any NodePartitioning entry."""

    index: int
    strategy: str
    rule: str  # the rule's text; "" for the built-in default
    pinned: bool
    annotation: bool  # the node annotation gave it


def resolve(
    gpus: Iterable[Gpu], chart: StrategyRules, annotation: StrategyRules | None = None
) -> dict[int, Resolved]:
    """Each GPU's strategy: the node annotation's rules first (every one of them pins, its default
    included: the admin wrote it for this node), then the chart's (`--strategy`), then `exclusive`."""
    out: dict[int, Resolved] = {}
    for gpu in gpus:
        choice = annotation.choose(gpu) if annotation is not None else None
        from_annotation = choice is not None
        if choice is None:
            choice = chart.choose(gpu) or Choice(BUILTIN_DEFAULT, "", False)
        out[gpu.index] = Resolved(gpu.index, choice.strategy, choice.rule, choice.pinned, from_annotation)
    return out


def can_run(gpu: Gpu, strategy: str) -> str:
    """Why the GPU cannot run `strategy` ("" when it can): the per-GPU check a fallback replaces."""
    if strategy == names.STRATEGY_MIG and not gpu.mig_capable:
        return f"{gpu.name} ({gpu.product}) has no MIG support"
    return ""
