"""The optional mutating admission webhook (off by default): pure decisions plus its HTTPS edge.

For a pod that asks for any of the legacy resources (init containers included) it
- sets `schedulerName` to the carve scheduler when the pod names none or `default-scheduler` (a pod that
  names another scheduler is left alone);
- adds `nvidia.com/gpu: <default-gpu-num>` to a container that asks for memory, a percentage or cores but
  no GPU count: the kubelet never calls Allocate for a container without a registered resource;
- denies a privileged container that asks for a GPU: it would see every GPU and bypass the limiter;
- denies a pod the extender would never place (its request does not parse, or a container asks a priority
  the admin does not allow in its namespace: docs/legacy.md, "Priority"), with the extender's reason.
Answers are AdmissionReview v1 with a JSONPatch, served by driver/admission.py.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from driver import admission, names
from driver.legacy.request import Defaults, RequestError, pod_request, wants_legacy_gpu

MAX_BODY = 1 << 20
SIZE_NAMES = (names.LEGACY_GPUMEM, names.LEGACY_GPUMEM_PERCENTAGE, names.LEGACY_GPUCORES)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str = ""
    patch: tuple[dict, ...] = ()


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def review(
    pod: dict,
    scheduler_name: str = names.LEGACY_SCHEDULER_NAME,
    default_gpu_num: int = 1,
    defaults: Defaults | None = None,
) -> Decision:
    if not wants_legacy_gpu(pod):
        return Decision(True)
    try:
        pod_request(pod, defaults or Defaults(gpu_num=default_gpu_num))
    except RequestError as e:
        return Decision(False, f"the carve scheduler would never place this pod: {e}")
    spec = pod.get("spec") or {}
    patch: list[dict] = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            res = c.get("resources") or {}
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            asked = {**requests, **limits}
            if not any(n in asked for n in (names.LEGACY_GPU, *SIZE_NAMES)):
                continue
            if (c.get("securityContext") or {}).get("privileged"):
                return Decision(
                    False,
                    f"container {c.get('name')} is privileged and asks for a GPU share; "
                    "a privileged container sees every GPU and is not limited",
                )
            if names.LEGACY_GPU not in asked and default_gpu_num > 0:
                base = f"/spec/{key}/{i}/resources"
                if not res:
                    patch.append({"op": "add", "path": base, "value": {}})
                if "limits" not in res:
                    patch.append({"op": "add", "path": f"{base}/limits", "value": {}})
                gpu = _escape(names.LEGACY_GPU)
                patch.append({"op": "add", "path": f"{base}/limits/{gpu}", "value": str(default_gpu_num)})
    if spec.get("schedulerName") in (None, "", "default-scheduler"):
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name})
    return Decision(True, patch=tuple(patch))


def pod_review(
    request: Mapping[str, Any], scheduler_name: str, default_gpu_num: int, defaults: Defaults | None = None
) -> Decision:
    """An AdmissionRequest's pod -> the decision (the route's handler)."""
    pod = request.get("object") or {}
    if (
        isinstance(pod, dict)
        and request.get("namespace")
        and not (pod.get("metadata") or {}).get("namespace")
    ):
        # A created pod's namespace is the request's (the object may not carry it yet).
        pod = {**pod, "metadata": {**(pod.get("metadata") or {}), "namespace": request["namespace"]}}
    return review(pod, scheduler_name, default_gpu_num, defaults)


def admission_response(
    body: dict, scheduler_name: str, default_gpu_num: int, defaults: Defaults | None = None
) -> dict:
    """AdmissionReview in -> AdmissionReview out (v1)."""
    return admission.admission_response(
        body,
        functools.partial(
            pod_review, scheduler_name=scheduler_name, default_gpu_num=default_gpu_num, defaults=defaults
        ),
    )


class WebhookServer(admission.AdmissionServer):
    """POST /mutate over HTTPS (plain HTTP without a certificate: tests)."""

    def __init__(
        self,
        addr: str,
        scheduler_name: str,
        default_gpu_num: int,
        cert_file: str = "",
        key_file: str = "",
        defaults: Defaults | None = None,
    ) -> None:
        handler = functools.partial(
            pod_review, scheduler_name=scheduler_name, default_gpu_num=default_gpu_num, defaults=defaults
        )
        super().__init__(addr, {"/mutate": handler}, cert_file, key_file, max_body=MAX_BODY)
