"""The chart's admission policies, evaluated (tests/support/admission.py runs their CEL with cel-python) on
allowed and forbidden requests: the plugin's ResourceSlice writes, and claim configs against their classes.
A real API server evaluates them again in e2e/."""

from __future__ import annotations

import itertools

import pytest
from helm_render import FAKE_VALUES, NAMESPACE, render
from support.admission import AdmissionRequest, PolicyEvaluator, evaluators

from api.v1alpha1 import ConfigError, resolve_configs
from driver import names
from driver.devices.slices import slice_name

PLUGIN_SA = f"system:serviceaccount:{NAMESPACE}:carve-kubelet-plugin"
NODE_KEY = "authentication.kubernetes.io/node-name"


@pytest.fixture(scope="module")
def policies() -> dict[str, PolicyEvaluator]:
    return evaluators(render("-f", str(FAKE_VALUES)))


# --- ResourceSlices: the plugin writes only its own node's pool of its own driver ----------------------


def slice_obj(node: str = "node-a", pool: str | None = None, driver: str = names.DRIVER_NAME) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node, 0)},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node if pool is None else pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


def slice_write(
    op: str, new: dict | None = None, old: dict | None = None, node: str | None = "node-a", user=None
):
    extra = {NODE_KEY: [node]} if node else {}
    return AdmissionRequest(
        op, "resource.k8s.io", "v1", "resourceslices", user or PLUGIN_SA, extra, object=new, old_object=old
    )


def slice_decision(policies, request: AdmissionRequest):
    decision = policies["carve-resourceslices"].admit(request)
    assert not decision.errors, decision.errors
    return decision


@pytest.mark.parametrize(
    "request_",
    [
        slice_write("CREATE", slice_obj()),
        slice_write("UPDATE", slice_obj(), slice_obj()),
        slice_write("DELETE", old=slice_obj()),
    ],
    ids=["create", "update", "delete"],
)
def test_plugin_may_write_its_own_nodes_pool(policies, request_):
    decision = slice_decision(policies, request_)
    assert decision.matched and decision.allowed, decision.denials


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        # The review's finding: a node publishing into another node's pool (its nodeName is its own).
        (slice_write("CREATE", slice_obj(pool="node-b")), "spec.pool.name must be the node name"),
        (slice_write("UPDATE", slice_obj(pool="node-b"), slice_obj()), "not pool 'node-b'"),
        (slice_write("UPDATE", slice_obj(), slice_obj(pool="node-b")), "may only change its own pool"),
        (slice_write("CREATE", slice_obj(driver="gpu.nvidia.com")), "not of driver 'gpu.nvidia.com'"),
        (slice_write("DELETE", old=slice_obj(driver="gpu.nvidia.com")), "not of driver 'gpu.nvidia.com'"),
        (slice_write("CREATE", slice_obj("node-b")), "not of node 'node-b'"),
        (slice_write("UPDATE", slice_obj(), slice_obj("node-b", pool="node-a")), "not of node 'node-b'"),
        (slice_write("DELETE", old=slice_obj("node-b")), "not of node 'node-b'"),
        (slice_write("CREATE", slice_obj(), node=None), "pod-bound projected service account token"),
    ],
    ids=[
        "pool-of-another-node",
        "update-into-another-pool",
        "update-takes-another-pool",
        "another-driver",
        "delete-another-drivers-slice",
        "another-node",
        "update-takes-another-nodes-slice",
        "delete-another-nodes-slice",
        "token-without-node",
    ],
)
def test_plugin_may_not_write_another_nodes_pool_or_driver(policies, request_, says):
    decision = slice_decision(policies, request_)
    assert decision.matched and not decision.allowed
    assert any(says in d for d in decision.denials), decision.denials


def test_other_users_are_not_the_policys_business(policies):
    admin = slice_write("CREATE", slice_obj(pool="node-b"), node=None, user="kubernetes-admin")
    assert not slice_decision(policies, admin).matched
    pods = AdmissionRequest("CREATE", "", "v1", "pods", PLUGIN_SA, {NODE_KEY: ["node-a"]}, object={})
    assert not slice_decision(policies, pods).matched


def test_every_served_version_is_covered(policies):
    for version in ("v1", "v1beta1", "v1beta2"):
        request = AdmissionRequest(
            "CREATE",
            "resource.k8s.io",
            version,
            "resourceslices",
            PLUGIN_SA,
            {NODE_KEY: ["node-a"]},
            object=slice_obj(pool="node-b"),
        )
        assert not slice_decision(policies, request).allowed


# --- ResourceClaims: what a claim's config may set, per DeviceClass --------------------------------------


def device_class(name: str, *parameters: dict) -> dict:
    spec: dict = {"selectors": [{"cel": {"expression": "true"}}]}
    if parameters:
        spec["config"] = [{"opaque": {"driver": names.DRIVER_NAME, "parameters": p}} for p in parameters]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def slice_cfg(**fields) -> dict:
    return {"apiVersion": names.CONFIG_API_VERSION, "kind": "SliceConfig", **fields}


def gpu_cfg(**fields) -> dict:
    return {"apiVersion": names.CONFIG_API_VERSION, "kind": "GpuConfig", **fields}


def claim_spec(configs, class_name="vgpu.carve.dev", requests=None) -> dict:
    entries = [
        {
            **({"requests": r} if r is not None else {}),
            "opaque": {"driver": names.DRIVER_NAME, "parameters": p},
        }
        for p, r in configs
    ]
    reqs = requests or [{"name": "gpu", "exactly": {"deviceClassName": class_name}}]
    return {"devices": {"requests": reqs, "config": entries}}


def claim(configs, kind="ResourceClaim", **spec_args) -> AdmissionRequest:
    spec = claim_spec(configs, **spec_args)
    if kind == "ResourceClaimTemplate":
        obj = {"kind": kind, "metadata": {"name": "t"}, "spec": {"spec": spec}}
        resource = "resourceclaimtemplates"
    else:
        obj = {"kind": kind, "metadata": {"name": "c"}, "spec": spec}
        resource = "resourceclaims"
    return AdmissionRequest("CREATE", "resource.k8s.io", "v1", resource, "alice", object=obj)


CHART_CLASSES = [device_class(c) for c in names.DEVICE_CLASSES]


def claim_denials(policies, request: AdmissionRequest, classes=CHART_CLASSES) -> list[str]:
    out = []
    for name in ("carve-claim-configs", "carve-claim-policy"):
        decision = policies[name].admit(request, classes)
        assert not decision.errors, decision.errors
        out += decision.denials
    return out


def test_claim_cannot_disable_throttling_in_a_class_that_does_not_allow_it(policies):
    (denial,) = claim_denials(policies, claim([(slice_cfg(corePolicy="disable"), None)]))
    assert denial.startswith(
        "spec.devices.config: corePolicy 'disable' is not allowed by DeviceClass vgpu.carve.dev"
    )


def test_claim_may_tighten_and_lower_itself(policies):
    assert claim_denials(policies, claim([(slice_cfg(corePolicy="force", priority="low"), None)])) == []


def test_class_claim_policy_can_allow_disable(policies):
    burst = device_class("vgpu-burst.carve.dev", slice_cfg(claimPolicy={"corePolicy": ["disable"]}))
    request = claim([(slice_cfg(corePolicy="disable"), None)], class_name="vgpu-burst.carve.dev")
    assert claim_denials(policies, request, [*CHART_CLASSES, burst]) == []
    # The same config against the chart's class is still refused: each class decides for its own claims.
    assert claim_denials(policies, claim([(slice_cfg(corePolicy="disable"), None)]), [*CHART_CLASSES, burst])


def test_claim_cannot_raise_the_priority_its_class_set(policies):
    low = device_class("vgpu-batch.carve.dev", slice_cfg(priority="low"))
    request = claim([(slice_cfg(priority="high"), None)], class_name="vgpu-batch.carve.dev")
    (denial,) = claim_denials(policies, request, [low])
    assert "priority 'high' is not allowed by DeviceClass vgpu-batch.carve.dev" in denial


def test_template_configs_are_checked_at_their_own_path(policies):
    (denial,) = claim_denials(
        policies, claim([(slice_cfg(corePolicy="disable"), None)], kind="ResourceClaimTemplate")
    )
    assert denial.startswith("spec.spec.devices.config: corePolicy 'disable'")


def test_claim_policy_in_a_claim_is_refused(policies):
    (denial,) = claim_denials(policies, claim([(slice_cfg(claimPolicy={"corePolicy": ["disable"]}), None)]))
    assert "claimPolicy may only be set in a DeviceClass" in denial


@pytest.mark.parametrize("interval", ["Short", "Medium", "Long"])
def test_time_slice_lengths_carve_cannot_apply_are_refused(policies, interval):
    sharing = {"strategy": "TimeSlicing", "timeSlicing": {"interval": interval}}
    (denial,) = claim_denials(
        policies, claim([(gpu_cfg(sharing=sharing), None)], class_name="timeslice.carve.dev")
    )
    assert "sharing.timeSlicing.interval: only Default" in denial
    sharing["timeSlicing"]["interval"] = "Default"
    assert (
        claim_denials(policies, claim([(gpu_cfg(sharing=sharing), None)], class_name="timeslice.carve.dev"))
        == []
    )


def test_entries_for_other_requests_classes_and_drivers_are_not_judged_by_this_class(policies):
    requests = [
        {"name": "soft", "exactly": {"deviceClassName": "vgpu.carve.dev"}},
        {"name": "whole", "exactly": {"deviceClassName": "gpu.carve.dev"}},
    ]
    ok = claim(
        [(slice_cfg(priority="low"), ["soft"]), (gpu_cfg(sharing={"strategy": "TimeSlicing"}), ["whole"])],
        requests=requests,
    )
    assert claim_denials(policies, ok) == []
    other_driver = claim([(slice_cfg(corePolicy="disable"), None)])
    other_driver.object["spec"]["devices"]["config"][0]["opaque"]["driver"] = "gpu.nvidia.com"
    assert claim_denials(policies, other_driver) == []


def test_first_available_alternatives_are_checked_against_their_class(policies):
    requests = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "mig", "deviceClassName": "mig.carve.dev"},
                {"name": "soft", "deviceClassName": "vgpu.carve.dev"},
            ],
        }
    ]
    for target in (["gpu/soft"], ["gpu"], None):
        request = claim([(slice_cfg(corePolicy="disable"), target)], requests=requests)
        assert any("DeviceClass vgpu.carve.dev" in d for d in claim_denials(policies, request)), target
    # An entry for the other alternative is that alternative's class's business only.
    request = claim([(slice_cfg(corePolicy="disable"), ["gpu/mig"])], requests=requests)
    denials = claim_denials(policies, request)
    assert denials and not any("vgpu.carve.dev" in d for d in denials), denials


def test_gpu_config_strategy_bounded_by_class(policies):
    exclusive_only = device_class("gpu-solo.carve.dev", gpu_cfg(claimPolicy={"sharing": {"strategy": []}}))
    request = claim([(gpu_cfg(sharing={"strategy": "TimeSlicing"}), None)], class_name="gpu-solo.carve.dev")
    (denial,) = claim_denials(policies, request, [exclusive_only])
    assert "sharing.strategy 'TimeSlicing' is not allowed by DeviceClass gpu-solo.carve.dev" in denial


# Every combination of a class value, a claimPolicy listing and a claim value: the admission policy and the
# plugin's own rule (api/v1alpha1/policy.py, applied at prepare) decide the same.
FIELDS = {
    "corePolicy": ("disable", "default", "force"),
    "priority": ("high", "low"),
    "oomPolicy": ("error", "kill"),
    "sharing.strategy": ("Exclusive", "TimeSlicing"),
}
LISTINGS = (None, [], ["disable", "low", "kill", "TimeSlicing"], ["force", "high", "error", "Exclusive"])


def _config_with(field: str, value: str, listing: list[str] | None = None) -> tuple[dict, str]:
    """(parameters, device type) setting `field` (and a claimPolicy listing for it)."""
    if field == "sharing.strategy":
        params = gpu_cfg(sharing={"strategy": value})
        if listing is not None:
            params["claimPolicy"] = {"sharing": {"strategy": listing}}
        return params, names.TYPE_GPU
    params = slice_cfg(**{field: value})
    if listing is not None:
        params["claimPolicy"] = {field: listing}
    return params, names.TYPE_VGPU


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_admission_and_prepare_agree_on_every_combination(policies, field):
    values = FIELDS[field]
    for class_value, listing, claim_value in itertools.product(values, LISTINGS, values):
        listed = None if listing is None else [v for v in listing if v in values]
        class_params, device_type = _config_with(field, class_value, listed)
        claim_params, _ = _config_with(field, claim_value)
        cls = device_class("x.carve.dev", class_params)
        denials = claim_denials(policies, claim([(claim_params, None)], class_name="x.carve.dev"), [cls])
        class_entry = {"opaque": {"driver": names.DRIVER_NAME, "parameters": class_params}}
        claim_entry = {"opaque": {"driver": names.DRIVER_NAME, "parameters": claim_params}}
        try:
            resolve_configs([class_entry], [claim_entry], "gpu", device_type, class_name="x.carve.dev")
            prepare_allows = True
        except ConfigError:
            prepare_allows = False
        assert (denials == []) is prepare_allows, (class_value, listed, claim_value, denials)


def test_claims_without_carve_config_pass_untouched(policies):
    bare = claim([])
    del bare.object["spec"]["devices"]["config"]
    assert claim_denials(policies, bare) == []
    empty = AdmissionRequest(
        "CREATE", "resource.k8s.io", "v1", "resourceclaims", "alice", object={"spec": {}}
    )
    assert claim_denials(policies, empty) == []
    # The scheduler's status writes go to the status subresource, which the policies do not match.
    status = AdmissionRequest(
        "UPDATE", "resource.k8s.io", "v1", "resourceclaims/status", "scheduler", object={}
    )
    assert not policies["carve-claim-policy"].matches_rules(status)


# --- Events: every Node Event reason the plugin posts is one the events policy lets through ------------


def _node_event_reasons() -> set[str]:
    """Reasons the plugin's code posts about its Node (strategies.node_event("<Reason>", ...) and the
    health monitor's node events), read from the code so a new one cannot be forgotten here."""
    import re
    from pathlib import Path

    found: set[str] = set()
    for path in (Path(__file__).resolve().parents[3] / "driver" / "plugin").rglob("*.py"):
        found |= set(re.findall(r'node_event\(\s*"([A-Z]\w+)"', path.read_text()))
    return found


def test_every_node_event_the_plugin_posts_is_admitted(policies):
    from driver.plugin.events import node_event

    reasons = _node_event_reasons() | {"GpuUnhealthy", "GpuHealthy"}
    assert {"StrategyFallback", "FeatureGatesOff", "ContainerToolkitUnsafe"} <= reasons  # the scan works
    events = next(p for name, p in policies.items() if name.endswith("-events"))
    for reason in [*sorted(reasons), "SomethingElse"]:
        obj = node_event("node-a", reason, "m")
        req = AdmissionRequest("CREATE", "", "v1", "events", PLUGIN_SA, extra={NODE_KEY: ["node-a"]},
                               object=obj, name="e", namespace=obj["metadata"].get("namespace", "default"))
        decision = events.admit(req)
        assert decision.matched and not decision.errors, (reason, decision.errors)
        assert decision.allowed == (reason != "SomethingElse"), (reason, decision.denials)
