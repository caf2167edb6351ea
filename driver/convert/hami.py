"""HAMi pod specs to DRA, pure: one model for `carve convert` (command.py) and the controller's mutating
webhook (driver/admission.py).

Each container that asks HAMi's resources (`nvidia.com/gpu`, `nvidia.com/gpumem` in MiB,
`nvidia.com/gpumem-percentage`, `nvidia.com/gpucores` in percent of SMs, `nvidia.com/priority`) is parsed by
the legacy shim's parser (driver/legacy/request.py: HAMi's names, units and defaults, written once) and
becomes one ResourceClaim spec:
- `nvidia.com/gpu: n` alone (HAMi's exclusive card): `n` whole GPUs of the exclusive class;
- a share: `n` devices of the share class (a soft slice by default), each with `capacity.requests.memory`
  (gpumem MiB as `<n>Mi`) and `cores`, `n` > 1 on distinct GPUs (`distinctAttribute: gpu.carve.dev/uuid`);
- a percentage (or a share with no memory, which HAMi gives all of each GPU's memory): DRA has only
  absolute amounts, so one `firstAvailable` alternative per GPU model the converter knows (`GpuModel`:
  from ResourceSlices), each selecting its model by productName and asking that model's share;
- `nvidia.com/priority` other than 0: the share's opaque SliceConfig `priority: low`;
- the pod annotations `nvidia.com/use-gputype`, `nouse-gputype`, `use-gpuuuid`, `nouse-gpuuuid`: CEL
  selectors (types as HAMi matches them: a case-insensitive substring of the product name).
The container loses its `nvidia.com/*` resources and gains a `resources.claims` entry; the pod gains a
`resourceClaims` entry naming the template. Anything that cannot be converted faithfully is a ConvertError
naming the object and field.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from driver import names
from driver.legacy.request import ContainerRequest, Defaults, RequestError, Selectors, container_request

MI = 1 << 20
HAMI_RESOURCES = (
    names.LEGACY_GPU,
    names.LEGACY_GPUMEM,
    names.LEGACY_GPUMEM_PERCENTAGE,
    names.LEGACY_GPUCORES,
    names.LEGACY_PRIORITY,
)
HAMI_SCHEDULERS = ("hami-scheduler", names.LEGACY_SCHEDULER_NAME)
REQUEST = "gpu"
# kind -> where its pod spec is
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "PodTemplate": ("template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
# HAMi's own reading of a pod's GPU asks (any container may set them; the converter reads them all the
# same way, whatever the cluster's legacy defaults are): no default memory (a share without gpumem is the
# whole GPU's memory), no SM cap unless asked, one GPU when only a size is given, and every priority allowed
# (the DeviceClass's claimPolicy bounds it on DRA).
HAMI_DEFAULTS = Defaults(memory_mib=0, cores=0, gpu_num=1, priority="high", high_priority_namespaces=("*",))
_LABEL = re.compile(r"[^a-z0-9-]+")


class ConvertError(ValueError):
    """A manifest that cannot be converted faithfully; the message names the object and field."""


@dataclass(frozen=True)
class GpuModel:
    product: str  # NVML's name, the devices' productName attribute
    memory: int  # bytes a share of this model may ask at most (its soft device's memory capacity)


@dataclass(frozen=True)
class Options:
    share_class: str = names.CLASS_VGPU
    whole_class: str = names.CLASS_GPU
    models: tuple[GpuModel, ...] = ()
    memory_step: int = 256 * MI  # percentages round down to the soft memory step


@dataclass(frozen=True)
class ClaimTemplate:
    """One container's claim: the pod's claim entry name, and the template's spec.spec."""

    container: str
    claim_name: str
    spec: dict[str, Any]
    was: dict[str, str]  # the container's HAMi resources, as written (for the audit annotation)


@dataclass
class Converted:
    obj: dict[str, Any]
    templates: list[dict[str, Any]] = field(default_factory=list)  # ResourceClaimTemplate objects
    changed: bool = False


def _dns_label(text: str, limit: int = 63) -> str:
    label = _LABEL.sub("-", text.lower()).strip("-") or "x"
    if len(label) <= limit:
        return label
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{label[: limit - 9].rstrip('-')}-{digest}"


def _resources(container: Mapping[str, Any]) -> dict[str, Any]:
    res = container.get("resources") or {}
    merged = dict(res.get("requests") or {})
    merged.update(res.get("limits") or {})
    return merged


def asks_hami(spec: Mapping[str, Any]) -> bool:
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, Mapping) and any(k in _resources(c) for k in HAMI_RESOURCES):
                return True
    return False


def _quote(s: str) -> str:
    return json.dumps(s)  # a CEL string literal (CEL accepts JSON's escapes)


def _selectors(sel: Selectors) -> list[dict[str, Any]]:
    attrs = f"device.attributes[{_quote(names.DRIVER_NAME)}]"
    exprs = []
    if sel.use_types:
        types = ", ".join(_quote(t.lower()) for t in sel.use_types)
        exprs.append(f"[{types}].exists(t, {attrs}.productName.lowerAscii().contains(t))")
    for t in sel.nouse_types:
        exprs.append(f"!{attrs}.productName.lowerAscii().contains({_quote(t.lower())})")
    if sel.use_uuids:
        exprs.append(f"{attrs}.uuid in [{', '.join(map(_quote, sel.use_uuids))}]")
    if sel.nouse_uuids:
        exprs.append(f"!({attrs}.uuid in [{', '.join(map(_quote, sel.nouse_uuids))}])")
    return [{"cel": {"expression": e}} for e in exprs]


def _type_allowed(product: str, sel: Selectors) -> bool:
    p = product.lower()
    if sel.use_types and not any(t.lower() in p for t in sel.use_types):
        return False
    return not any(t.lower() in p for t in sel.nouse_types)


def _field_of(where: str, c: Mapping[str, Any], key: str) -> str:
    res = c.get("resources") or {}
    part = "limits" if key in (res.get("limits") or {}) else "requests"
    return f"{where}.resources.{part}.{key}"


def claim_spec(
    req: ContainerRequest, sel: Selectors, options: Options, where: str, c: Mapping[str, Any]
) -> dict[str, Any]:
    """The ResourceClaim spec of one container's request (`where`: the container's field path)."""
    asked = _resources(c)
    selectors = _selectors(sel)
    whole = req.memory_mib == 0 and req.percent == 100 and req.cores == 100
    if whole:
        exactly: dict[str, Any] = {"deviceClassName": options.whole_class}
        if req.count > 1:
            exactly["count"] = req.count
        if selectors:
            exactly["selectors"] = selectors
        return {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}}
    cores = {"cores": str(req.cores)} if req.cores else {}
    count = {"count": req.count} if req.count > 1 else {}
    request: dict[str, Any] = {"name": REQUEST}
    if req.memory_mib:
        exactly = {
            "deviceClassName": options.share_class,
            **count,
            **({"selectors": selectors} if selectors else {}),
            "capacity": {"requests": {"memory": f"{req.memory_mib}Mi", **cores}},
        }
        request["exactly"] = exactly
    else:
        key = names.LEGACY_GPUMEM_PERCENTAGE if names.LEGACY_GPUMEM_PERCENTAGE in asked else names.LEGACY_GPU
        what = (
            f"{req.percent}% of each GPU's memory"
            if key == names.LEGACY_GPUMEM_PERCENTAGE
            else "a share of all of each GPU's memory (HAMi's reading of a share without nvidia.com/gpumem)"
        )
        models = {}
        for m in options.models:
            if _type_allowed(m.product, sel):
                models[m.product] = min(m.memory, models.get(m.product, m.memory))
        if not models:
            raise ConvertError(
                f"{_field_of(where, c, key)}: asks {what}; DRA requests absolute amounts and no GPU model "
                "is known to compute it from (give the cluster's ResourceSlices: carve convert --slices, "
                f"or write {names.LEGACY_GPUMEM} in MiB)"
            )
        subs = []
        for product, memory in sorted(models.items()):
            amount = memory * req.percent // 100 // options.memory_step * options.memory_step
            if amount < options.memory_step:
                raise ConvertError(
                    f"{_field_of(where, c, key)}: {req.percent}% of {product}'s {memory // MI}Mi is under "
                    f"the {options.memory_step // MI}Mi step of a share"
                )
            product_sel = {
                "cel": {
                    "expression": f"device.attributes[{_quote(names.DRIVER_NAME)}].productName == "
                    f"{_quote(product)}"
                }
            }
            subs.append(
                {
                    "name": _dns_label(product),
                    "deviceClassName": options.share_class,
                    **count,
                    "selectors": [product_sel, *selectors],
                    "capacity": {"requests": {"memory": f"{amount // MI}Mi", **cores}},
                }
            )
        if len({s["name"] for s in subs}) != len(subs):
            raise ConvertError(f"{_field_of(where, c, key)}: two GPU models have one name once lowercased")
        request["firstAvailable"] = subs
    devices: dict[str, Any] = {"requests": [request]}
    if req.count > 1:
        devices["constraints"] = [{"requests": [REQUEST], "distinctAttribute": f"{names.DRIVER_NAME}/uuid"}]
    if req.priority == "low":
        devices["config"] = [
            {
                "requests": [REQUEST],
                "opaque": {
                    "driver": names.DRIVER_NAME,
                    "parameters": {
                        "apiVersion": names.CONFIG_API_VERSION,
                        "kind": "SliceConfig",
                        "priority": "low",
                    },
                },
            }
        ]
    return {"devices": devices}


def _strip(container: dict[str, Any]) -> dict[str, str]:
    """Remove HAMi's resources from a container; what it had (as strings)."""
    was: dict[str, str] = {}
    res = container.get("resources")
    if not isinstance(res, dict):
        return was
    for part in ("requests", "limits"):
        values = res.get(part)
        if not isinstance(values, dict):
            continue
        for key in HAMI_RESOURCES:
            if key in values:
                was[key] = str(values.pop(key))
        if not values:
            res.pop(part)
    return was


def convert_pod_spec(
    label: str,
    where: str,
    annotations: Mapping[str, str],
    namespace: str,
    spec: Mapping[str, Any],
    options: Options,
    claim_name: Callable[[str], str] = lambda container: f"{container}-gpu",
) -> tuple[dict[str, Any], list[ClaimTemplate]]:
    """A pod spec without HAMi's resources, and the claim of each container that asked for GPUs.

    `label` names the object (`Deployment web`), `where` the pod spec's path (`spec.template.spec`)."""
    from driver.legacy.request import pod_request

    try:
        sel = pod_request(
            {"metadata": {"annotations": dict(annotations)}, "spec": {}}, HAMI_DEFAULTS
        ).selectors
    except RequestError as e:
        raise ConvertError(f"{label}: metadata.annotations: {str(e).split(': ', 1)[-1]}") from None
    new = copy.deepcopy(dict(spec))
    claims: list[ClaimTemplate] = []
    taken = {rc.get("name") for rc in new.get("resourceClaims") or [] if isinstance(rc, Mapping)}
    for key, init in (("initContainers", True), ("containers", False)):
        for i, c in enumerate(new.get(key) or []):
            if not isinstance(c, dict) or not any(k in _resources(c) for k in HAMI_RESOURCES):
                continue
            path = f"{where}.{key}[{i}]"
            try:
                req = container_request(f"{label}: {path}", c, init, HAMI_DEFAULTS, namespace)
            except RequestError as e:
                raise ConvertError(str(e)) from None
            if req is None:  # nvidia.com/gpu: 0, or priority alone: asks for no GPU
                _strip(c)
                continue
            spec_ = claim_spec(req, sel, options, f"{label}: {path}", c)
            was = _strip(c)
            name = claim_name(c.get("name", str(i)))
            if name in taken:
                raise ConvertError(
                    f"{label}: {where}.resourceClaims: a claim named {name!r} exists already "
                    f"(container {c.get('name')} needs that name)"
                )
            taken.add(name)
            res = c.setdefault("resources", {})
            res.setdefault("claims", []).append({"name": name})
            claims.append(ClaimTemplate(c.get("name", ""), name, spec_, was))
    if new.get("schedulerName") in HAMI_SCHEDULERS:
        new.pop("schedulerName")
    return new, claims


def template_object(name: str, namespace: str, spec: dict[str, Any], labels: Mapping[str, str]) -> dict:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {"spec": spec},
    }


def content_name(spec: Mapping[str, Any]) -> str:
    """A template name from its content (the webhook's: one template per distinct ask, shared by pods)."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return f"hami-{digest}"


def _dig(obj: Mapping[str, Any], path: Iterable[str]) -> Any:
    cur: Any = obj
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def convert_object(obj: Mapping[str, Any], options: Options = Options()) -> Converted:
    """One manifest: a Pod or a workload with a pod template; other kinds come back unchanged."""
    kind = obj.get("kind", "")
    path = POD_SPEC_PATHS.get(kind)
    if path is None:
        return Converted(copy.deepcopy(dict(obj)))
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName", "").rstrip("-")
    label = f"{kind} {name}" if name else kind
    spec = _dig(obj, path)
    if not isinstance(spec, Mapping) or not asks_hami(spec):
        return Converted(copy.deepcopy(dict(obj)))
    if not name:
        raise ConvertError(f"{kind}: metadata.name: missing (the claim templates are named after it)")
    # The pod's annotations: a workload's pod template's, or the Pod's own.
    pod_meta = obj.get("metadata") if kind == "Pod" else _dig(obj, (*path[:-1], "metadata"))
    annotations = (pod_meta or {}).get("annotations") or {}
    namespace = meta.get("namespace", "")
    new_spec, claims = convert_pod_spec(
        label,
        ".".join(path),
        annotations,
        namespace,
        spec,
        options,
        claim_name=lambda container: _dns_label(f"{container}-gpu"),
    )
    templates = []
    resource_claims = new_spec.setdefault("resourceClaims", [])
    for t in claims:
        tname = _dns_label(f"{name}-{t.container}-gpu", 253)
        templates.append(template_object(tname, namespace, t.spec, {names.CONVERTED_LABEL: "hami"}))
        resource_claims.append({"name": t.claim_name, "resourceClaimTemplateName": tname})
    out = copy.deepcopy(dict(obj))
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = new_spec
    return Converted(out, templates, changed=True)


def models_from_slices(slices: Iterable[Mapping[str, Any]]) -> tuple[GpuModel, ...]:
    """The GPU models of carve's shareable devices (soft and MPS) in ResourceSlices, each with the least
    memory capacity one of its devices offers."""
    found: dict[str, int] = {}
    from driver.allocator import quantity

    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != names.DRIVER_NAME:
            continue
        for d in spec.get("devices") or []:
            attrs = d.get("attributes") or {}
            kind = (attrs.get("type") or {}).get("string")
            product = (attrs.get("productName") or {}).get("string")
            memory = ((d.get("capacity") or {}).get("memory") or {}).get("value")
            if kind not in (names.TYPE_VGPU, names.TYPE_MPS) or not product or memory is None:
                continue
            try:
                value = int(quantity.of(memory).value)
            except (quantity.QuantityError, ValueError, TypeError):
                continue
            found[product] = min(value, found.get(product, value))
    return tuple(GpuModel(p, m) for p, m in sorted(found.items()))
