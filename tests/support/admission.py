"""A small evaluator of ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1) on cel-python, so the
chart's policies are tested by running their CEL on requests, not by reading their text.

It follows the API server's order: matchConstraints.resourceRules (group, version, resource, operation),
then the binding's params (paramKind + paramRef.selector: one evaluation per matching object;
parameterNotFoundAction when none), then matchConditions (all must hold, else the policy does not apply),
then variables in order (each sees the earlier ones as `variables.<name>`), then validations (false ->
denied with message or messageExpression). Differences, on purpose: variables are evaluated eagerly, and an
expression that fails to evaluate is reported in `errors` (the API server would apply failurePolicy), so a
test sees any expression that breaks on a case. Only the CEL both cel-python and the API server accept
works here (no optional types `.?`/orValue, no Kubernetes extension libraries); the chart is written so.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes, json_to_cel


@dataclass(frozen=True)
class AdmissionRequest:
    operation: str  # CREATE, UPDATE, DELETE
    group: str
    version: str
    resource: str  # plural, e.g. resourceslices
    username: str
    extra: dict[str, list[str]] = field(default_factory=dict)
    object: dict | None = None
    old_object: dict | None = None

    def as_cel(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "resource": {"group": self.group, "version": self.version, "resource": self.resource},
            "userInfo": {"username": self.username, "extra": self.extra},
        }


@dataclass
class Decision:
    matched: bool  # False: the policy does not apply to the request (rules, matchConditions, no params)
    denials: list[str] = field(default_factory=list)  # messages of the validations that failed
    errors: list[str] = field(default_factory=list)  # expressions that could not be evaluated

    @property
    def allowed(self) -> bool:
        return not self.denials


@functools.lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    return celpy.Environment()


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> celpy.Runner:
    env = _environment()
    return env.program(env.compile(expression))


def _cel(value: Any) -> Any:
    return celtypes.NullType() if value is None else json_to_cel(value)


class PolicyEvaluator:
    """One rendered policy with its binding."""

    def __init__(self, policy: dict, binding: dict) -> None:
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        self.spec = policy["spec"]
        self.binding = binding["spec"]
        # Compile everything up front: a syntax cel-python (and so, mostly, the API server) refuses fails
        # here.
        for expr in self._expressions():
            _program(expr)

    def _expressions(self) -> Iterable[str]:
        for item in (
            *self.spec.get("matchConditions", []),
            *self.spec.get("variables", []),
            *self.spec.get("validations", []),
        ):
            yield item["expression"]
            if "messageExpression" in item:
                yield item["messageExpression"]

    def matches_rules(self, req: AdmissionRequest) -> bool:
        def has(values: list[str], value: str) -> bool:
            return "*" in values or value in values

        return any(
            has(rule["apiGroups"], req.group)
            and has(rule["apiVersions"], req.version)
            and has(rule["resources"], req.resource)
            and has(rule["operations"], req.operation)
            for rule in self.spec["matchConstraints"]["resourceRules"]
        )

    def _params(self, candidates: Iterable[dict]) -> list[dict | None] | None:
        kind = self.spec.get("paramKind")
        if kind is None:
            return [None]
        ref = self.binding["paramRef"]
        labels = (ref.get("selector") or {}).get("matchLabels") or {}
        found = [
            c
            for c in candidates
            if c.get("apiVersion") == kind["apiVersion"]
            and c.get("kind") == kind["kind"]
            and all((c["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        ]
        return found or None

    def admit(self, req: AdmissionRequest, params: Iterable[dict] = ()) -> Decision:
        if not self.matches_rules(req):
            return Decision(matched=False)
        param_objects = self._params(params)
        if param_objects is None:
            if self.binding["paramRef"].get("parameterNotFoundAction") == "Allow":
                return Decision(matched=False)
            return Decision(matched=True, denials=["no parameter object found"])
        decision = Decision(matched=False)
        for param in param_objects:
            self._evaluate(req, param, decision)
        return decision

    def _evaluate(self, req: AdmissionRequest, param: dict | None, decision: Decision) -> None:
        activation: dict[str, Any] = {
            "request": _cel(req.as_cel()),
            "object": _cel(req.object),
            "oldObject": _cel(req.old_object),
            "params": _cel(param),
            "variables": celtypes.MapType({}),
        }

        def run(expression: str) -> Any:
            result = _program(expression).evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                raise result
            return result

        try:
            for cond in self.spec.get("matchConditions", []):
                if not run(cond["expression"]):
                    return
            variables: dict[Any, Any] = {}
            for var in self.spec.get("variables", []):
                variables[celtypes.StringType(var["name"])] = run(var["expression"])
                activation["variables"] = celtypes.MapType(variables)
        except celpy.CELEvalError as e:
            decision.matched = True
            decision.errors.append(f"{e}")
            return
        decision.matched = True
        for check in self.spec.get("validations", []):
            try:
                ok = run(check["expression"])
                if not isinstance(ok, celtypes.BoolType):
                    raise celpy.CELEvalError(f"{check['expression']!r} gave {type(ok).__name__}, not a bool")
                if ok:
                    continue
                if "messageExpression" in check:
                    decision.denials.append(str(run(check["messageExpression"])))
                else:
                    decision.denials.append(
                        check.get("message") or f"failed expression: {check['expression']}"
                    )
            except celpy.CELEvalError as e:
                decision.errors.append(f"{check['expression']!r}: {e}")


def evaluators(objects: list[dict]) -> dict[str, PolicyEvaluator]:
    """Policy name -> evaluator, for the policies and bindings among rendered chart objects."""
    bindings = {
        o["spec"]["policyName"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    return {
        o["metadata"]["name"]: PolicyEvaluator(o, bindings[o["metadata"]["name"]])
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
    }
