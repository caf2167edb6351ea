"""The Kubernetes device-selector CEL environment on cel-python.

Owns: turning a device into the `device` variable (driver, attributes and capacity by domain,
allowMultipleAllocations), compiling each expression once (process-wide, thread-safe), the
semantic rules of Kubernetes (unknown domain is an empty map, unknown name is an error, the
result must be a boolean, at most 10 KiB of expression) and its cost budget (cel_cost: a
worst-case estimate at compile time, a meter during each evaluation; regexes are RE2). Each
compiled Program also carries what it reads from a device (cel_ast) and, for common shapes, a
fast-path closure (cel_fast); the per-allocator result cache is cel_cache.SelectorCache.

Runner choice: cel-python's CompiledRunner transpiles to Python and evaluates several times faster
than the InterpretedRunner on selector-sized expressions (measured in
tests/benchmarks/test_allocator_throughput.py), but its evaluate writes module globals of
celpy.evaluation, so every compiled evaluation runs under one lock.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
import celpy.evaluation
import lark
from celpy import celtypes
from celpy.celparser import CELParseError, CELParser
from celpy.evaluation import TranspilerTree

from driver.allocator import cel_ast, cel_cost, cel_fast
from driver.allocator import quantity as q
from driver.allocator import semver as sv
from driver.allocator.cel_library import FUNCTIONS, CelFunctionError

# resource.k8s.io: CELSelectorExpressionMaxLength.
MAX_EXPRESSION_LENGTH = 10 * 1024


class CelError(Exception):
    """An expression that cannot be compiled or that failed at runtime; names the expression."""

    def __init__(self, expression: str, message: str) -> None:
        self.expression = expression
        self.message = message
        super().__init__(f"{message} (expression: {_short(expression)})")


def _short(expression: str, limit: int = 200) -> str:
    one_line = " ".join(expression.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


_EMPTY = celtypes.MapType()


class DomainMap(celtypes.MapType):
    """`device.attributes` / `device.capacity`: an unknown domain reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return _EMPTY


def attribute_value(raw: Mapping[str, Any]) -> Any:
    """One DeviceAttribute ({"int": 1} | {"bool": true} | {"string": "x"} | {"version": "1.0.0"})."""
    # A value of the wrong JSON type is refused, not converted: the API server would not decode
    # {"bool": "false"} (which bool() reads as true) or {"string": ["a"]}.
    if "int" in raw:
        v = raw["int"]
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"int attribute is not an integer: {v!r}")
        if not q.INT64_MIN <= v <= q.INT64_MAX:
            raise ValueError(f"int attribute is out of the int64 range: {v}")
        return celtypes.IntType(v)
    if "bool" in raw:
        if not isinstance(raw["bool"], bool):
            raise TypeError(f"bool attribute is not true or false: {raw['bool']!r}")
        return celtypes.BoolType(raw["bool"])
    if "string" in raw:
        if not isinstance(raw["string"], str):
            raise TypeError(f"string attribute is not a string: {raw['string']!r}")
        return celtypes.StringType(raw["string"])
    if "version" in raw:
        return sv.parse(raw["version"])
    raise ValueError(f"attribute has no int, bool, string or version value: {dict(raw)!r}")


def split_name(name: str, driver: str) -> tuple[str, str]:
    """'domain/id' -> (domain, id); a bare 'id' belongs to the driver's domain."""
    domain, sep, ident = name.rpartition("/")
    return (domain, ident) if sep else (driver, name)


def qualify(names: Mapping[str, Any] | None, driver: str) -> dict[tuple[str, str], Any]:
    """{name: raw} -> {(domain, id): raw}; of two names for one (domain, id) the later wins."""
    return {split_name(name, driver): raw for name, raw in (names or {}).items()}


def device_value(driver: str, attributes: Mapping[str, Any], capacity: Mapping[str, Any],
                 allow_multiple_allocations: bool) -> celtypes.MapType:
    """The `device` variable for one device, in the shape Kubernetes gives selectors."""
    attrs: dict[str, dict] = {}
    for (domain, ident), raw in qualify(attributes, driver).items():
        attrs.setdefault(domain, {})[celtypes.StringType(ident)] = attribute_value(raw)
    caps: dict[str, dict] = {}
    for (domain, ident), raw in qualify(capacity, driver).items():
        caps.setdefault(domain, {})[celtypes.StringType(ident)] = q.of(raw["value"])
    return celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("attributes"): DomainMap(
            {celtypes.StringType(d): celtypes.MapType(v) for d, v in attrs.items()}),
        celtypes.StringType("capacity"): DomainMap(
            {celtypes.StringType(d): celtypes.MapType(v) for d, v in caps.items()}),
        celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(allow_multiple_allocations),
    })


def _explain(err: BaseException) -> str:
    """cel-python error -> a sentence close to what Kubernetes prints."""
    if isinstance(err, celpy.CELEvalError):
        text, exc_type, args = ([*list(err.args), None, None, None])[:3]
        if exc_type is CelFunctionError:  # returned by cel_library._soft, already worded
            return str(text)
        if text == "evaluation error" and isinstance(args, tuple) and args:
            # CompiledRunner wraps the real error: CELEvalError("evaluation error", type, inner.args);
            # the inner error is cel-python's own CELEvalError (its args are text, type, args) or a
            # Python error of the transpiled code, whose args are its message
            return _explain(celpy.CELEvalError(*args))
        if exc_type is KeyError or "no such" in str(text):
            key = args[0] if isinstance(args, tuple) and args else None
            detail = str(text).replace("no such member in mapping: ", "no such key: ")
            if key is not None and "no such key" in detail and str(key) not in detail:
                detail = f"no such key: {key}"
            return detail
        if isinstance(args, tuple) and args:
            return f"{text}: {', '.join(str(a) for a in args)}"
        return str(text)
    return f"{type(err).__name__}: {err}"  # a plain Python error out of the interpreted runner


class Runners:
    """Which runner to use; module-level switches so benchmarks can compare: cel-python's
    compiled or interpreted runner, and whether the fast path (cel_fast) answers first."""

    compiled = True
    fast = True


@dataclass
class Program:
    """One compiled selector expression: the cel-python runner, what it reads from a device
    (None: anything), and the fast-path closure when its shape is covered (cel_fast)."""

    expression: str
    runner: Any
    compiled: bool
    reads: tuple[cel_ast.Read, ...] | None  # None: anything
    fast: Callable[[Any], bool] | None
    reads_id: int  # cel_ast.read_set_id of reads; -1 when reads is None

    def evaluate(self, device: celtypes.MapType) -> bool:
        try:
            if self.compiled:
                with _COMPILED_LOCK:
                    result = self._metered(device)
            else:
                result = self._metered(device)
        except cel_cost.CostLimitExceeded as e:
            raise CelError(self.expression, str(e)) from None
        # a library function's error is not raised: cel_library._soft returns it as CEL's error value
        except celpy.CELEvalError as e:
            raise CelError(self.expression, f"CEL runtime error: {_explain(e)}") from None
        except Exception as e:  # cel-python surfaces some evaluation failures as plain Python errors
            raise CelError(self.expression, f"CEL runtime error: {_explain(e)}") from None
        if isinstance(result, celpy.CELEvalError):
            raise CelError(self.expression, f"CEL runtime error: {_explain(result)}")
        if not isinstance(result, (bool, celtypes.BoolType)):
            raise CelError(self.expression,
                           f"CEL result must be a boolean, got {type(result).__name__} {result!r}")
        return bool(result)

    def _metered(self, device: celtypes.MapType) -> Any:
        """Evaluate under a fresh cost meter; cel-python turns exceptions raised inside functions
        into error values (which `&&`/`||` may absorb), so the meter's verdict is read afterwards."""
        cel_cost.Meter.start()
        try:
            result = self.runner.evaluate({"device": device})
        except Exception:
            if cel_cost.Meter.stop() is not None:  # whatever cel-python made of it, the budget decides
                raise cel_cost.CostLimitExceeded(cel_cost.Meter.last_reason()) from None
            raise
        over = cel_cost.Meter.stop()
        if over is not None:
            raise cel_cost.CostLimitExceeded(over)
        return result


class _Parser(CELParser):
    """cel-python keeps one Lark parser per process, built with the tree class of whoever came
    first; the transpiler needs TranspilerTree nodes, so we keep a parser of our own."""

    def __init__(self) -> None:
        shared = CELParser.CEL_PARSER
        CELParser.CEL_PARSER = None
        try:
            super().__init__(tree_class=TranspilerTree)
            self._lark = CELParser.CEL_PARSER
        finally:
            CELParser.CEL_PARSER = shared

    def parse(self, text: str) -> Any:
        try:
            return self._lark.parse(text)
        except (lark.UnexpectedToken, lark.UnexpectedCharacters) as ex:
            raise CELParseError(ex.get_context(text), *ex.args, line=ex.line, column=ex.column) from None


def _install_function_namespace() -> None:
    """The transpiled code names each custom function as `<module>.<qualname>` and runs in the
    globals of celpy.evaluation; make our package reachable from there."""
    import driver

    vars(celpy.evaluation).setdefault("driver", driver)


# The transpiler logs every runtime error (a selector that does not apply to a device is normal
# here) at ERROR level; we report them ourselves.
logging.getLogger("celpy.Transpiler").setLevel(logging.CRITICAL)
logging.getLogger("celpy.CompiledRunner").setLevel(logging.CRITICAL)

_COMPILED_LOCK = threading.Lock()
_PROGRAMS: dict[tuple[str, bool], Program | CelError] = {}
_PROGRAMS_LOCK = threading.Lock()
_ENVS: dict[bool, celpy.Environment] = {}
_PARSER: _Parser | None = None


def _environment(compiled: bool) -> celpy.Environment:
    global _PARSER
    env = _ENVS.get(compiled)
    if env is None:
        if _PARSER is None:
            _PARSER = _Parser()
            _install_function_namespace()
        runner = celpy.CompiledRunner if compiled else celpy.InterpretedRunner
        # celpy.Environment raises the process-wide recursion limit as a side effect; selectors
        # are small, so keep the process's own limit (a too-deep expression is a CelError).
        limit = sys.getrecursionlimit()
        env = _ENVS[compiled] = celpy.Environment(runner_class=runner)
        sys.setrecursionlimit(limit)
    return env


def compile_selector(expression: str, compiled: bool | None = None) -> Program:
    """Compile once per process; raises CelError (also cached) for bad or oversized expressions."""
    use_compiled = Runners.compiled if compiled is None else compiled
    key = (expression, use_compiled)
    found = _PROGRAMS.get(key)
    if found is None:
        with _PROGRAMS_LOCK:
            found = _PROGRAMS.get(key)
            if found is None:
                found = _PROGRAMS[key] = _compile(expression, use_compiled)
    if isinstance(found, CelError):
        raise found
    return found


def _compile(expression: str, compiled: bool) -> Program | CelError:
    if not isinstance(expression, str) or not expression.strip():
        return CelError(str(expression), "CEL expression is empty")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        return CelError(expression, f"CEL expression is {len(expression)} characters long, more than the "
                                    f"limit of {MAX_EXPRESSION_LENGTH} (10 KiB)")
    env = _environment(compiled)
    try:
        assert _PARSER is not None
        ast = _PARSER.parse(expression)
        node = cel_ast.reduce(ast)
        if compiled and (cel_ast.calls(node, "has") or cel_ast.calls(node, "min")):
            # cel-python's compiled runner fails `!has(...)` ("no such overload") and does not
            # compile the lists library's `[...].min()` (it takes it for a macro without its
            # variable); the interpreted one gets both right, as Kubernetes does.
            compiled = False
            env = _environment(False)
        cost = cel_cost.estimate(node).cost
        if cost > cel_cost.MAX_COST:
            return CelError(expression, f"CEL expression too complex: worst-case cost {cost} exceeds the "
                                        f"limit of {cel_cost.MAX_COST}")
        runner = env.program(ast, functions=FUNCTIONS)
    except celpy.CELParseError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "syntax error"
        return CelError(expression, f"CEL compile error: {first}")
    except Exception as e:  # the transpiler rejects some constructs the parser accepts
        return CelError(expression, f"CEL compile error: {type(e).__name__}: {e}")
    found = cel_ast.reads(node)
    return Program(expression, runner, compiled, found, cel_fast.compile_fast(node),
                   -1 if found is None else cel_ast.read_set_id(found))


def evaluate(expression: str, device: celtypes.MapType) -> bool:
    """Compile (cached) and evaluate one expression against one device value; no result cache."""
    return compile_selector(expression).evaluate(device)
