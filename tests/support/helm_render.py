"""Rendering the Helm chart (helm/carve) with the helm binary that `make tools` puts in .tools/: imported as
`support.helm_render` (tests/unit/helm re-exports it as `helm_render` for its tests).

The binary is required, not optional: without it these tests fail and say how to get it, because a chart
that is never rendered in CI drifts silently.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "carve"
HELM = REPO / ".tools" / "helm"
FAKE_VALUES = CHART / "ci" / "fake-gpus-values.yaml"
KUBE_VERSIONS = ("1.34.0", "1.36.0")
NAMESPACE = "carve-system"
RELEASE = "carve"


def helm_binary() -> Path:
    if not HELM.is_file():
        pytest.fail(f"{HELM} is missing: run `make tools` (it fetches helm; `make test` runs it first)")
    return HELM


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=60)


@functools.lru_cache(maxsize=64)
def _render(kube_version: str, args: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    done = run_helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version, *args
    )
    if done.returncode != 0:
        raise RenderError(done.stderr.strip())
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


class RenderError(Exception):
    """helm template refused the values (schema, kubeVersion or a template `fail`)."""


def render(*args: str, kube_version: str = "1.34.0") -> list[dict[str, Any]]:
    """Objects of `helm template` with extra arguments (`--set a=b`, `-f file`); a fresh copy each call."""
    return yaml.safe_load(yaml.safe_dump(list(_render(kube_version, tuple(args)))))


# Components of the strategy controller (templates/controller.yaml, partitioning-admission.yaml) and the
# read-only carve-viewer role (viewer-rbac.yaml): `one()`
# and `rules_of()` leave them out unless asked for, so the plugin's tests keep meaning "the plugin's".
CONTROLLER_COMPONENTS = ("controller", "partitioning", "viewer")
# Also left out by default: the plugin's claims role and policy (templates/claims-rbac.yaml), asked for as
# of="claims", so `one(objects, "ClusterRole")` stays the plugin's publish/prepare role.
SEPARATE_COMPONENTS = (*CONTROLLER_COMPONENTS, "claims")


def component(obj: dict[str, Any]) -> str:
    return ((obj.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component", "")


def one(objects: list[dict[str, Any]], kind: str, of: str | None = None) -> dict[str, Any]:
    """The one object of `kind` of component `of` (default: any component but the controller's)."""
    found = [o for o in objects if o["kind"] == kind
             and (component(o) == of if of else component(o) not in SEPARATE_COMPONENTS)]
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def rules_of(objects: list[dict[str, Any]], of: str | None = None) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule of the chart's one ClusterRole (of component `of`)."""
    role = one(objects, "ClusterRole", of)
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def plugin_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "plugin"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """name -> value, or -> valueFrom for variables taken from the pod."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# Both the default (real GPUs through NVML) and the fake-GPU values, for every parametrised test.
SCENARIOS = {"default": (), "fake-gpus": ("-f", str(FAKE_VALUES))}
