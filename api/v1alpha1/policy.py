"""What a claim's own config may change of what its DeviceClass set: the cluster admin bounds the tenant.

The DeviceClass's config (entries marked `FromClass` in the allocation, written by the admin) is the base.
The claim's config (`FromClaim`, written by whoever may create claims) changes only the fields it sets,
and each change must be allowed:
- by the class's `claimPolicy`, when it lists the field: one of the listed values (or the class's own);
- otherwise by the safe rule: a claim may make itself tighter or humbler, never looser or more important.
  `corePolicy` may only move towards `force` (disable < default < force), `priority` only towards `low`;
  `oomPolicy` and `sharing` concern only the claim's own processes, so any value is allowed.

`memoryLimit` is bounded by the class's claimPolicy.maxMemoryLimitRatio (default 1) once the request is known
(driver/plugin/claims/plan.py); that ratio is the only part of a claimPolicy `bound` keeps.
`bound` is the one place that decides; it returns the config the device runs with (without `claimPolicy`),
and the decision code after it never looks at the raw claim config again. The admission policy of the Helm
chart (templates/claimpolicy.yaml) applies the same rules when a claim is created; docs/configuration.md
describes them for users.
"""

from __future__ import annotations

from typing import Any, get_args

from api.v1alpha1.config import (
    Config,
    ConfigError,
    CorePolicy,
    GpuConfig,
    OomPolicy,
    Priority,
    SharingStrategy,
    SliceClaimPolicy,
    SliceConfig,
)

# Each guarded field's values, from what weakens isolation most to what weakens it least: without a
# claimPolicy entry, a claim may only move to the right of the class's value.
SAFE_ORDER: dict[str, tuple[str, ...]] = {
    "corePolicy": ("disable", "default", "force"),
    "priority": ("high", "low"),
}
# Every value of each field a claim may set, for messages and for fields without a safe order.
VALUES: dict[str, tuple[str, ...]] = {
    "corePolicy": get_args(CorePolicy),
    "priority": get_args(Priority),
    "oomPolicy": get_args(OomPolicy),
    "sharing.strategy": get_args(SharingStrategy),
}
_TYPE_FIELDS = frozenset({"apiVersion", "kind"})


def allowed_values(field: str, class_value: str, listed: list[str] | None) -> tuple[str, ...]:
    """The values a claim may give `field` when its class has `class_value` and its claimPolicy lists
    `listed` for it (None: not listed)."""
    if listed is not None:
        return tuple(dict.fromkeys([class_value, *listed]))
    order = SAFE_ORDER.get(field)
    if order is None:
        return VALUES[field]
    return order[order.index(class_value) :]


def bound(claim: Config | None, base: Config, class_name: str = "", where: str = "") -> Config:
    """The config a device runs with: `base` (the class's, or the type's default) changed by the fields
    `claim` sets, each checked against the class's claimPolicy or the safe rule.

    `claim` and `base` are the same kind (resolve.py checks both against the device type). Raises
    ConfigError at `where` (the claim's entry, `claim config[i]`) naming the field, the value, the class
    that forbids it and what it allows.
    """
    effective = base.model_copy(update={"claimPolicy": _kept_policy(base)})
    if claim is None:
        return effective
    if type(claim) is not type(base):
        raise ConfigError(
            f"{claim.kind} cannot change a {base.kind}", field="opaque.parameters.kind", where=where
        )
    check_claim_entry(claim, where)
    changes = {name: getattr(claim, name) for name in claim.model_fields_set - _TYPE_FIELDS}
    for name, value in changes.items():
        field, wanted, class_value, listed = _guarded(name, value, base)
        if field is None or wanted == class_value:
            continue
        allowed = allowed_values(field, class_value, listed)
        if wanted not in allowed:
            raise ConfigError(
                f"{wanted!r} is not allowed by {_class(class_name)} ({_reason(field, class_value, listed)}; "
                f"a claim of this class may choose {', '.join(allowed)})",
                field=f"opaque.parameters.{field}",
                value=wanted,
                where=where,
            )
    return effective.model_copy(update=changes)


def check_claim_entry(claim: Config, where: str = "") -> None:
    """A claim's own entry (every one, also those a later entry overrides) must not carry a claimPolicy."""
    if claim.claimPolicy is not None:
        raise ConfigError(
            "only a DeviceClass's config may set it (it bounds what claims may change)",
            field="opaque.parameters.claimPolicy",
            value=claim.claimPolicy.model_dump(exclude_none=True),
            where=where,
        )


def _guarded(name: str, value: Any, base: Config) -> tuple[str | None, str, str, list[str] | None]:
    """(field path, wanted value, class value, listed values) of a changed top-level field; a None path
    for fields the policy does not bound (a value of `sharing` other than its strategy)."""
    policy = base.claimPolicy
    if isinstance(base, SliceConfig) and name == "memoryLimit":
        return None, "", "", None  # bounded at prepare against the request (claims/plan.py), by the ratio
    if isinstance(base, SliceConfig) and name == "placement":
        # Read by carve's allocator only, where the class's value already wins; prepare has no use for it.
        return None, "", "", None
    if isinstance(base, SliceConfig):
        listed = getattr(policy, name) if policy is not None else None
        return name, value, getattr(base, name), listed
    if isinstance(base, GpuConfig) and name == "sharing":
        sharing = policy.sharing if policy is not None else None
        listed = sharing.strategy if sharing is not None else None
        return "sharing.strategy", value.strategy, base.sharing.strategy, listed
    return None, "", "", None


def _kept_policy(base: Config) -> SliceClaimPolicy | None:
    """What of the class's claimPolicy the device still needs after `bound`: the memoryLimit ratio, which
    can only be checked once the request (the consumed capacity) is known."""
    policy = base.claimPolicy
    if isinstance(policy, SliceClaimPolicy) and policy.maxMemoryLimitRatio is not None:
        return SliceClaimPolicy(maxMemoryLimitRatio=policy.maxMemoryLimitRatio)
    return None


def _class(class_name: str) -> str:
    return f"DeviceClass {class_name}" if class_name else "the claim's DeviceClass"


def _reason(field: str, class_value: str, listed: list[str] | None) -> str:
    if listed is not None:
        return f"its claimPolicy.{field} lists {', '.join(listed) or 'no value'}"
    order = SAFE_ORDER[field]
    return (
        f"its {field} is {class_value!r} and, without claimPolicy.{field}, a claim may only move along "
        f"{' < '.join(order)} to the right"
    )
