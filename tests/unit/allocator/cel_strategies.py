"""Hypothesis strategies for selector tests: random devices and random selector expressions.

Devices draw attributes and capacities from a small vocabulary (so that selectors often find what
they read, and sometimes do not: a missing attribute is a CEL error), with every attribute kind,
qualified and bare names, and a second domain. Expressions combine the shapes DeviceClasses and
claims use, with `&&`, `||`, `!` and parentheses, plus forms only cel-python runs.
"""

from __future__ import annotations

from hypothesis import strategies as st

from driver.allocator import cel
from driver.allocator.model import Device, read_slice

DRIVER = "gpu.carve.dev"
DOMAINS = (DRIVER, "example.com")
NAMES = ("type", "index", "ok", "v", "profile")
CAPS = ("memory", "cores")

strings = st.sampled_from(["mig", "gpu", "1g.10gb", "a", ""])
ints = st.sampled_from([-1, 0, 3, 7, 2**40])
versions = st.sampled_from(["1.2.3", "8.0.0", "1.2.3-rc.1", "0.0.1", "1.2.3+b"])
quantities = st.sampled_from(["40Gi", "1Gi", "0", "100", "512Mi", "1.5", "1073741824"])
attribute_values = st.one_of(
    st.builds(lambda v: {"string": v}, strings), st.builds(lambda v: {"int": v}, ints),
    st.builds(lambda v: {"bool": v}, st.booleans()), st.builds(lambda v: {"version": v}, versions))


@st.composite
def raw_devices(draw, index: int = 0) -> dict:
    attrs = {}
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True)):
        qualified = draw(st.sampled_from([name, f"{DRIVER}/{name}", f"example.com/{name}"]))
        attrs[qualified] = draw(attribute_values)
    caps = {}
    for name in draw(st.lists(st.sampled_from(CAPS), max_size=2, unique=True)):
        qualified = draw(st.sampled_from([name, f"example.com/{name}"]))
        caps[qualified] = {"value": draw(quantities)}
    d = {"name": f"d{index}", "attributes": attrs, "capacity": caps}
    if draw(st.booleans()):
        d["allowMultipleAllocations"] = True
    return d


@st.composite
def device_lists(draw, min_size: int = 1, max_size: int = 8) -> list[Device]:
    """Devices of one or two slices (drivers may differ); repeats are likely, as in a cluster."""
    n = draw(st.integers(min_size, max_size))
    pool = [draw(raw_devices()) for _ in range(draw(st.integers(1, 3)))]
    raws = [dict(draw(st.sampled_from(pool)), name=f"d{i}") for i in range(n)]
    out: list[Device] = []
    for part, group in enumerate((raws[:n // 2], raws[n // 2:])):
        driver = draw(st.sampled_from([DRIVER, "other.dev"]))
        out += read_slice({"metadata": {"name": f"s{part}"}, "spec": {
            "driver": driver, "nodeName": "n", "devices": group,
            "pool": {"name": f"p{part}", "generation": 1, "resourceSliceCount": 1}}}).devices
    return out


def _attr(draw) -> str:
    domain, name = draw(st.sampled_from(DOMAINS)), draw(st.sampled_from(NAMES))
    form = draw(st.sampled_from([f'device.attributes["{domain}"].{name}',
                                 f'device.attributes["{domain}"]["{name}"]']))
    return form


def _cap(draw) -> str:
    domain, name = draw(st.sampled_from(DOMAINS)), draw(st.sampled_from(CAPS))
    return f'device.capacity["{domain}"].{name}'


def _literal(draw) -> str:
    return draw(st.one_of(strings.map(lambda s: f'"{s}"'), ints.map(str), st.sampled_from(["true", "false"])))


OPS = ["==", "!=", "<", "<=", ">", ">="]


@st.composite
def leaves(draw) -> str:
    """One comparison-like selector; the first several are fast-path shapes, the last not."""
    kind = draw(st.sampled_from([0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12]))
    op = draw(st.sampled_from(OPS))
    if kind == 0:
        return f'device.driver {draw(st.sampled_from(["==", "!="]))} "{draw(st.sampled_from([DRIVER, "x"]))}"'
    if kind == 1:
        return f"{_attr(draw)} {op} {_literal(draw)}"
    if kind == 2:
        return f"{_literal(draw)} {op} {_attr(draw)}"
    if kind == 3:
        sign = draw(st.sampled_from([-1, 0, 1]))
        return f'{_cap(draw)}.compareTo(quantity("{draw(quantities)}")) {op} {sign}'
    if kind == 4:
        method = draw(st.sampled_from(["isGreaterThan", "isLessThan"]))
        target = draw(st.sampled_from([_cap(draw), _attr(draw)]))
        arg = draw(st.sampled_from([f'quantity("{draw(quantities)}")', f'semver("{draw(versions)}")']))
        return f"{target}.{method}({arg})"
    if kind == 5:
        return f'{_attr(draw)}.compareTo(semver("{draw(versions)}")) {op} 0'
    if kind == 6:
        item = st.one_of(strings.map(lambda s: f'"{s}"'), ints.map(str))
        items = draw(st.lists(item, min_size=1, max_size=3))
        return f"{_attr(draw)} in [{', '.join(items)}]"
    if kind == 7:
        return f'"{draw(st.sampled_from(NAMES))}" in device.attributes["{draw(st.sampled_from(DOMAINS))}"]'
    if kind == 8:
        return draw(st.sampled_from(["device.allowMultipleAllocations", "!device.allowMultipleAllocations",
                                     _attr(draw), "true", "false"]))
    if kind == 9:
        return f"{_cap(draw)} {draw(st.sampled_from(['==', '!=']))} quantity(\"{draw(quantities)}\")"
    if kind == 10:
        return f"has({_attr(draw)})"
    if kind == 11:
        return f'size(device.attributes["{draw(st.sampled_from(DOMAINS))}"]) {op} {draw(st.integers(0, 3))}'
    return f'{_attr(draw)}.startsWith("{draw(strings)}")'


def _combine(children):
    return st.one_of(
        st.tuples(children, children).map(lambda ab: f"{ab[0]} && {ab[1]}"),
        st.tuples(children, children).map(lambda ab: f"{ab[0]} || {ab[1]}"),
        children.map(lambda a: f"!({a})"),
        children.map(lambda a: f"({a})"),
    )


expressions = st.recursive(leaves(), _combine, max_leaves=4)


def reference(expression: str, device: Device) -> tuple:
    """cel-python on the whole device variable, no cache, no fast path: (ok, value) or (error, message)."""
    try:
        return ("ok", cel.compile_selector(expression).evaluate(device.cel_value()))
    except cel.CelError as e:
        return ("error", e.message)
