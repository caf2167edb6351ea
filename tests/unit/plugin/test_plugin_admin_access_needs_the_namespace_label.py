"""Admin access at prepare (driver/plugin/claims/admin.py): a claim whose allocation gives it a device with
`adminAccess: true` is prepared only in a namespace labelled `resource.kubernetes.io/admin-access: "true"`,
read from the API server at prepare (the label may have been removed since the claim was admitted). The
namespace is JSON parsed at run time, its label's value a string of its own: "true" is compared by value,
and any other value, no label or no namespace refuses the claim, naming the device."""

from __future__ import annotations

import json

import pytest

from driver import names
from driver.plugin.claims.admin import ADMIN_LABEL, check_admin_namespace
from driver.plugin.claims.catalog import catalog_from_slices
from driver.plugin.claims.plan import ClaimPlan, ClaimRef, PrepareError, plan_claim

NODE = "node-a"
REF = ClaimRef("debug", "watch", "uid-1")


def admin_plan() -> ClaimPlan:
    device = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "minor": {"int": 0}}}
    catalog = catalog_from_slices([json.loads(json.dumps({"spec": {"devices": [device]}}))])
    result = {
        "request": "r",
        "driver": names.DRIVER_NAME,
        "pool": NODE,
        "device": "gpu-0",
        "adminAccess": True,
    }
    claim = {
        "metadata": {"uid": REF.uid, "name": REF.name, "namespace": REF.namespace},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    return plan_claim(REF, json.loads(json.dumps(claim)), NODE, catalog)


def namespace(labels: dict[str, str]) -> dict:
    # As the API server returns it: JSON parsed at run time.
    return json.loads(json.dumps({"metadata": {"name": REF.namespace, "labels": labels}}))


def test_the_admin_label_true_lets_the_claim_prepare() -> None:
    check_admin_namespace(admin_plan(), namespace({ADMIN_LABEL: "true", "team": "sre"}))


@pytest.mark.parametrize(
    "labels", [{ADMIN_LABEL: "false"}, {ADMIN_LABEL: "True"}, {ADMIN_LABEL: ""}, {"team": "sre"}, None]
)
def test_without_the_label_true_admin_access_is_refused(labels: dict[str, str] | None) -> None:
    ns = None if labels is None else namespace(labels)
    with pytest.raises(
        PrepareError, match=rf"adminAccess on gpu-0: namespace debug has no label {ADMIN_LABEL}"
    ):
        check_admin_namespace(admin_plan(), ns)
