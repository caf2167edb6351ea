"""Namespace GPU budgets, pure: what a claim charges, what a namespace has used, whether a new claim fits.

Upstream ResourceQuota counts DRA devices per DeviceClass (`<class>.deviceclass.resource.k8s.io/devices`,
k8s.io/kubernetes pkg/quota/v1/evaluator/core/resource_claims.go), never the capacity a claim asks of a
shared device. A soft slice or an MPS share of 4Gi and one of 40Gi are one device each there, so a namespace
budget of GPU memory and compute share needs a sum of `capacity.requests` across the namespace's claims,
which a ValidatingAdmissionPolicy cannot compute (its CEL sees the object under review and its params, never
a list). The controller's validating webhook (webhook.py) computes it from its ResourceClaim informer.

A budget is a pair of Namespace labels (names.BUDGET_MEMORY_LABEL, names.BUDGET_CORES_LABEL): labels, so
the webhook's namespaceSelector sends it only the claims of budgeted namespaces. A request counts when its
DeviceClass is one of the counted classes (the soft and MPS classes: those whose devices have consumable
`memory` and `cores`); it charges `count` x its memory (rounded up to the soft memory step, as the
scheduler consumes it) and `count` x its cores (percent of one GPU's SMs). A `firstAvailable` request
charges its costliest alternative, as upstream quota does with devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from driver import names
from driver.allocator import quantity

MEMORY, CORES = "memory", "cores"
RESOURCES = (MEMORY, CORES)
LABELS = {MEMORY: names.BUDGET_MEMORY_LABEL, CORES: names.BUDGET_CORES_LABEL}
COUNTED_CLASSES = frozenset({names.CLASS_VGPU, names.CLASS_VGPU_STRICT, names.CLASS_MPS})
MI = 1 << 20
DEFAULT_MEMORY_STEP = 256 * MI  # driver/devices Settings.soft_memory_step


class BudgetError(ValueError):
    """A budget label or a claim the budget cannot be applied to; the message names the object and field."""


@dataclass(frozen=True)
class Budget:
    namespace: str
    limits: Mapping[str, Fraction]  # resource -> bytes (memory) or percent (cores); only those set

    def __bool__(self) -> bool:
        return bool(self.limits)


@dataclass(frozen=True)
class Charge:
    """What one request of a claim takes from the budget."""

    field: str  # spec.devices.requests[0] (or ...firstAvailable[1])
    device_class: str
    count: int
    amounts: Mapping[str, Fraction]  # resource -> total over `count` devices


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str = ""
    resource: str = ""  # the resource over budget, when refused for that


def parse_budget(namespace: Mapping[str, Any]) -> Budget:
    """The budget a Namespace's labels set (an empty one when none is set)."""
    meta = namespace.get("metadata") or {}
    name = meta.get("name", "")
    labels = meta.get("labels") or {}
    limits: dict[str, Fraction] = {}
    for resource, label in LABELS.items():
        raw = labels.get(label)
        if raw is None:
            continue
        try:
            value = quantity.parse(str(raw)).value
        except quantity.QuantityError:
            raise BudgetError(
                f"namespace {name}: label {label}: {raw!r} is not a quantity (e.g. 40Gi, 250)"
            ) from None
        if value < 0:
            raise BudgetError(f"namespace {name}: label {label}: {raw!r} is negative")
        limits[resource] = value
    return Budget(name, limits)


def _capacity(requests: Mapping[str, Any], resource: str) -> Any:
    for key in (resource, f"{names.DRIVER_NAME}/{resource}"):
        if key in requests:
            return requests[key]
    return None


def _device_charge(
    where: str, device_class: str, req: Mapping[str, Any], needed: frozenset[str], memory_step: int
) -> Charge:
    mode = req.get("allocationMode") or "ExactCount"
    if mode != "ExactCount":
        raise BudgetError(
            f"{where}.allocationMode: {mode!r} takes every matching device: a namespace with a GPU budget "
            f"asks {device_class} for a count"
        )
    count = req.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise BudgetError(f"{where}.count: {count!r} is not a positive whole number")
    requests = (req.get("capacity") or {}).get("requests") or {}
    if not isinstance(requests, Mapping):
        raise BudgetError(f"{where}.capacity.requests: not a map")
    amounts: dict[str, Fraction] = {}
    for resource in RESOURCES:
        raw = _capacity(requests, resource)
        if raw is None:
            if resource == MEMORY and resource in needed:
                # The device's default (1/split of its GPU) differs per GPU model: not a number to charge.
                raise BudgetError(
                    f"{where}.capacity.requests.memory: missing; namespace budgets GPU memory "
                    f"({names.BUDGET_MEMORY_LABEL}), so each {device_class} request states its memory"
                )
            amounts[resource] = Fraction(0)  # cores: the devices' default is 0 (no SM share reserved)
            continue
        try:
            value = quantity.of(raw).value
        except (quantity.QuantityError, TypeError, ValueError):
            raise BudgetError(f"{where}.capacity.requests.{resource}: {raw!r} is not a quantity") from None
        if value < 0:
            raise BudgetError(f"{where}.capacity.requests.{resource}: {raw!r} is negative")
        if resource == MEMORY and memory_step > 0:
            value = Fraction(-(-value // memory_step) * memory_step)  # the scheduler consumes whole steps
        amounts[resource] = value * count
    return Charge(where, device_class, count, amounts)


def claim_charges(
    spec: Mapping[str, Any],
    needed: Iterable[str] = RESOURCES,
    counted: frozenset[str] = COUNTED_CLASSES,
    field: str = "spec",
    memory_step: int = DEFAULT_MEMORY_STEP,
) -> list[Charge]:
    """The charges of a ResourceClaim spec (`field` names where it sits: `spec`, `spec.spec` of a template).

    `needed`: the resources the namespace budgets (a missing memory request is refused only then)."""
    needs = frozenset(needed)
    devices = (spec or {}).get("devices") or {}
    out: list[Charge] = []
    for i, request in enumerate(devices.get("requests") or []):
        where = f"{field}.devices.requests[{i}]"
        if not isinstance(request, Mapping):
            raise BudgetError(f"{where}: not a map")
        if request.get("exactly") is not None:
            exactly = request["exactly"]
            cls = exactly.get("deviceClassName", "")
            if cls in counted:
                out.append(_device_charge(f"{where}.exactly", cls, exactly, needs, memory_step))
            continue
        worst: Charge | None = None
        for j, sub in enumerate(request.get("firstAvailable") or []):
            cls = sub.get("deviceClassName", "")
            if cls not in counted:
                continue
            charge = _device_charge(f"{where}.firstAvailable[{j}]", cls, sub, needs, memory_step)
            if worst is None:
                worst = charge
                continue
            # The costliest alternative: each resource at its maximum, named after the alternative that
            # costs the most memory.
            merged = {r: max(worst.amounts[r], charge.amounts[r]) for r in RESOURCES}
            lead = charge if charge.amounts[MEMORY] > worst.amounts[MEMORY] else worst
            worst = Charge(lead.field, lead.device_class, lead.count, merged)
        if worst is not None:
            out.append(worst)
    return out


def total(charges: Iterable[Charge]) -> dict[str, Fraction]:
    out = dict.fromkeys(RESOURCES, Fraction(0))
    for c in charges:
        for r in RESOURCES:
            out[r] += c.amounts.get(r, Fraction(0))
    return out


def allocated_amounts(claim: Mapping[str, Any], counted: frozenset[str]) -> dict[str, Fraction] | None:
    """What an allocated claim's counted requests consumed (`consumedCapacity` of its results), or None when
    the claim is not allocated or none of its results is of a counted class."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    if not results:
        return None
    classes: dict[str, str] = {}
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if not isinstance(request, Mapping):
            continue
        if request.get("exactly") is not None:
            classes[request.get("name", "")] = (request.get("exactly") or {}).get("deviceClassName", "")
        for sub in request.get("firstAvailable") or []:
            classes[f"{request.get('name', '')}/{sub.get('name', '')}"] = sub.get("deviceClassName", "")
    out = dict.fromkeys(RESOURCES, Fraction(0))
    counted_any = False
    for r in results:
        if not isinstance(r, Mapping) or classes.get(r.get("request", "")) not in counted:
            continue
        counted_any = True
        consumed = r.get("consumedCapacity") or {}
        for resource in RESOURCES:
            raw = _capacity(consumed, resource)
            try:
                out[resource] += quantity.of(raw).value if raw is not None else 0
            except (quantity.QuantityError, TypeError, ValueError):
                continue
    return out if counted_any else None


@dataclass(frozen=True)
class Usage:
    used: Mapping[str, Fraction]
    claims: int  # claims charging anything
    unreadable: tuple[str, ...] = ()  # claims whose spec could not be charged (counted as 0), by name


def namespace_usage(
    claims: Iterable[Mapping[str, Any]],
    counted: frozenset[str] = COUNTED_CLASSES,
    skip: str = "",
    memory_step: int = DEFAULT_MEMORY_STEP,
) -> Usage:
    """The sum over existing claims (all of one namespace): an allocated claim counts what it consumed
    (`consumedCapacity`), a pending one what it asks. A pending claim the budget cannot charge counts 0 and
    is listed (`unreadable`)."""
    used = dict.fromkeys(RESOURCES, Fraction(0))
    n = 0
    bad: list[str] = []
    for claim in claims:
        name = (claim.get("metadata") or {}).get("name", "")
        if name == skip:
            continue
        consumed = allocated_amounts(claim, counted)
        if consumed is not None:  # allocated: what the scheduler took (requests without memory included)
            n += 1
            for r, v in consumed.items():
                used[r] += v
            continue
        try:
            charges = claim_charges(claim.get("spec") or {}, (), counted, memory_step=memory_step)
        except BudgetError:
            bad.append(name)
            continue
        if charges:
            n += 1
        for r, v in total(charges).items():
            used[r] += v
    return Usage(used, n, tuple(bad))


def show(resource: str, value: Fraction) -> str:
    """40Gi, 1536Mi, 250% (cores)."""
    if resource == CORES:
        return f"{float(value):g}%"
    v = int(value)
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", MI), ("Ki", 1 << 10)):
        if v and v % size == 0:
            return f"{v // size}{unit}"
    return f"{v}"


def decide(
    budget: Budget,
    kind: str,
    name: str,
    charges: list[Charge],
    usage: Usage,
    resources: Iterable[str] = RESOURCES,
) -> Decision:
    """Admit a new claim (or refuse it, naming namespace, class, request, what is used and what remains)."""
    asked = total(charges)
    for r in resources:
        if r not in budget.limits or not asked[r]:
            continue
        limit, used = budget.limits[r], usage.used[r]
        if used + asked[r] <= limit:
            continue
        remaining = max(limit - used, Fraction(0))
        parts = ", ".join(
            f"{c.device_class} {c.count} x {show(r, c.amounts[r] / c.count)} at {c.field}"
            for c in charges
            if c.amounts.get(r)
        )
        return Decision(
            False,
            f"namespace {budget.namespace}: GPU {r} budget exceeded: {kind} {name} asks {show(r, asked[r])} "
            f"({parts}); {show(r, used)} of {show(r, limit)} is in use by {usage.claims} claim(s), "
            f"{show(r, remaining)} remains (label {LABELS[r]}={show(r, limit)})",
            r,
        )
    return Decision(True)


@dataclass(frozen=True)
class BudgetRow:
    namespace: str
    resource: str
    used: Fraction
    limit: Fraction
    claims: int

    def as_dict(self) -> dict[str, Any]:
        unit = "bytes" if self.resource == MEMORY else "percent"
        return {
            "namespace": self.namespace,
            "resource": self.resource,
            "unit": unit,
            "used": float(self.used) if self.resource == CORES else int(self.used),
            "limit": float(self.limit) if self.resource == CORES else int(self.limit),
            "claims": self.claims,
        }


def budget_rows(
    namespaces: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    counted: frozenset[str] = COUNTED_CLASSES,
    memory_step: int = DEFAULT_MEMORY_STEP,
) -> list[BudgetRow]:
    """Each budgeted namespace's use against its budget, one row per budgeted resource (metrics, status).
    A namespace whose labels do not parse is left out (the webhook names it on every claim)."""
    by_ns: dict[str, list[Mapping[str, Any]]] = {}
    for c in claims:
        by_ns.setdefault((c.get("metadata") or {}).get("namespace", ""), []).append(c)
    rows = []
    for ns in namespaces:
        try:
            budget = parse_budget(ns)
        except BudgetError:
            continue
        if not budget:
            continue
        usage = namespace_usage(by_ns.get(budget.namespace, []), counted, memory_step=memory_step)
        for r in RESOURCES:
            if r in budget.limits:
                rows.append(BudgetRow(budget.namespace, r, usage.used[r], budget.limits[r], usage.claims))
    return rows
