"""The opt-in mutating webhook of HAMi pods (served by the controller, driver/admission.py): the
same conversion as `carve convert` (hami.py), applied to each Pod as it is created.

A mutating webhook cannot add objects to the pod's request, and a pod can name only existing claims or
templates, so each distinct ask becomes a ResourceClaimTemplate named after its content (`hami-<hash>`) in
the pod's namespace, created once and shared by every pod asking the same (a Deployment's replicas share
one). On a dry run nothing is created. The pod's spec loses its `nvidia.com/*` resources and gains the claims;
its annotation names.CONVERTED_ANNOTATION records what each container asked before. Percentages take the GPU
models from the controller's ResourceSlice informer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from driver import names
from driver.convert.hami import (
    ConvertError,
    GpuModel,
    Options,
    asks_hami,
    content_name,
    convert_pod_spec,
    template_object,
)


class TemplateError(Exception):
    """The API server refused a template the conversion needs; the message is its reason."""


@dataclass(frozen=True)
class Mutation:
    allowed: bool
    message: str = ""
    patch: tuple[dict[str, Any], ...] = ()


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class HamiMutator:
    def __init__(
        self,
        models: Callable[[], tuple[GpuModel, ...]],
        ensure_template: Callable[[str, dict[str, Any]], None],
        options: Options | None = None,
    ) -> None:
        self.models = models
        self.ensure_template = ensure_template  # (namespace, template object): create unless it exists
        self.options = options or Options()

    def review(self, request: Mapping[str, Any]) -> Mutation:
        resource = (request.get("resource") or {}).get("resource", "")
        if request.get("operation") != "CREATE" or resource != "pods" or request.get("subResource"):
            return Mutation(True)
        pod = request.get("object") or {}
        spec = pod.get("spec") or {}
        if not asks_hami(spec):
            return Mutation(True)
        meta = pod.get("metadata") or {}
        ns = request.get("namespace") or meta.get("namespace", "")
        label = f"pod {ns}/{meta.get('name') or meta.get('generateName', '')}"
        options = replace(self.options, models=self.models())
        try:
            new_spec, claims = convert_pod_spec(
                label, "spec", meta.get("annotations") or {}, ns, spec, options
            )
        except ConvertError as e:
            return Mutation(False, f"carve HAMi conversion: {e}")
        resource_claims = new_spec.setdefault("resourceClaims", [])
        was: dict[str, dict[str, str]] = {}
        for t in claims:
            name = content_name(t.spec)
            if not request.get("dryRun"):
                try:
                    self.ensure_template(
                        ns, template_object(name, ns, t.spec, {names.CONVERTED_LABEL: "hami"})
                    )
                except TemplateError as e:
                    return Mutation(
                        False,
                        f"carve HAMi conversion: {label}: container {t.container}: ResourceClaimTemplate "
                        f"{ns}/{name}: {e}",
                    )
            resource_claims.append({"name": t.claim_name, "resourceClaimTemplateName": name})
            was[t.container] = t.was
        patch: list[dict[str, Any]] = [{"op": "replace", "path": "/spec", "value": new_spec}]
        record = json.dumps(was, sort_keys=True, separators=(",", ":"))
        if meta.get("annotations"):
            path = f"/metadata/annotations/{_escape(names.CONVERTED_ANNOTATION)}"
            patch.append({"op": "add", "path": path, "value": record})
        else:
            patch.append(
                {"op": "add", "path": "/metadata/annotations", "value": {names.CONVERTED_ANNOTATION: record}}
            )
        return Mutation(True, patch=tuple(patch))
