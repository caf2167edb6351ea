"""Admin access at prepare (KEP-5018, GA in 1.36): who may have it, and what it gives.

An allocation result with `adminAccess: true` lets a debug or monitoring pod attach to a device that
other claims use. The API server only admits such a claim in a namespace labelled
`resource.kubernetes.io/admin-access: "true"` (k8s.io/api resource/v1 DRAAdminNamespaceLabelKey); the
plugin checks the label again at prepare, because the label may have been removed since, and because an
allocation is written by whoever holds `resourceclaims/binding`, not only the scheduler.

What the preparer does for an admin device: no quota and no limiter (no limits file, no region, nothing
counted in the neighbours' shares), no MIG instance created or destroyed (a MIG placement gives the parent
GPU's device node: the pod sees every instance through NVML), MIG mode never switched for it, and it never
holds up a strategy change (driver/plugin/mig/modes.py prepared_per_gpu).
"""

from __future__ import annotations

from driver.plugin.claims.plan import ClaimPlan, PrepareError

ADMIN_LABEL = "resource.kubernetes.io/admin-access"


def needs_admin(plan: ClaimPlan) -> bool:
    return any(p.admin for p in plan.devices)


def check_admin_namespace(plan: ClaimPlan, namespace: dict | None) -> None:
    """PrepareError unless the claim's namespace carries the admin-access label with value "true"."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(ADMIN_LABEL) != "true":
        admin = [p.device.name for p in plan.devices if p.admin]
        raise PrepareError(
            f"{plan.ref}: status.allocation.devices.results: adminAccess on {', '.join(admin)}: namespace "
            f'{plan.ref.namespace} has no label {ADMIN_LABEL}="true" (admin access is refused)'
        )
