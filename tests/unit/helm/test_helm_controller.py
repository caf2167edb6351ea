"""The chart's strategy controller: a two-replica Deployment configured through its flags' env twins, RBAC
that is exactly the calls the controller makes, the default PartitioningPolicy (valid for its CRD), and
the admission policies of NodePartitioning status and hardware-isolated namespaces."""

from __future__ import annotations

import ast
from pathlib import Path

import jsonschema
import pytest
import yaml
from helm_render import NAMESPACE, REPO, RenderError, one, render, rules_of

from api.v1alpha1.partitioning import parse_policy
from driver.cli import build_parser, env_twin
from driver.cluster.base import OBJECT_KINDS
from driver.controller.reconcile import WATCHED

CONTROLLER_CODE = REPO / "driver" / "controller"
VERB = {"get_object": "get", "create_object": "create", "update_object": "update"}
PLURALS = {"PLURAL": "nodepartitionings"}  # module constants naming a plural


def object_calls(path: Path) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of each literal `<x>.api.get_object/create_object/update_object("<plural>",
    ...)` in a module (status=True: the status subresource)."""
    calls = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in VERB
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "api"
        ):
            plural = (
                node.args[0].value if isinstance(node.args[0], ast.Constant) else PLURALS[node.args[0].id]
            )
            status = any(k.arg == "status" for k in node.keywords)
            group = OBJECT_KINDS[plural][0].rpartition("/")[0]
            calls.add((group, plural + ("/status" if status else ""), VERB[node.func.attr]))
    return calls


def plugin_partitioning_calls() -> set[tuple[str, str, str]]:
    """What driver/plugin/mig/partitioning.py calls: its object's get and status update, list + watch."""
    calls = object_calls(REPO / "driver" / "plugin" / "mig" / "partitioning.py")
    return calls | {("carve.dev", "nodepartitionings", v) for v in ("list", "watch")}


def controller_calls() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb): list+watch of every watched kind, and each literal
    `<x>.api.get_object/create_object/update_object("<plural>", ...)` in driver/controller/ and in the
    shared Lease elector it runs (driver/cluster/leader.py, through ObjectLeases)."""
    calls = {(OBJECT_KINDS[p][0].rpartition("/")[0], p, v) for p in WATCHED for v in ("list", "watch")}
    for path in [*sorted(Path(CONTROLLER_CODE).glob("*.py")), REPO / "driver" / "cluster" / "leader.py"]:
        calls |= object_calls(path)
    return calls


def granted(objects, kinds=("ClusterRole", "Role")) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for o in objects
        if o["kind"] in kinds and o["metadata"]["labels"].get("app.kubernetes.io/component") == "controller"
        for rule in o["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_rbac_grants_exactly_the_calls_the_controller_makes():
    used = controller_calls()
    assert ("carve.dev", "nodepartitionings", "update") in used and ("", "events", "create") in used
    assert ("coordination.k8s.io", "leases", "get") in used  # the scan sees leader.py
    assert granted(render()) == used


def test_the_lease_is_written_only_by_name_and_in_the_release_namespace():
    role = one(render(), "Role", of="controller")
    assert role["metadata"]["namespace"] == NAMESPACE
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["carve-controller"],
            "verbs": ["get", "update"],
        }
    ]


def test_two_replicas_run_the_controller_with_leader_election():
    objects = render()
    dep = one(objects, "Deployment", of="controller")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == ["controller"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["CARVE_LEADER_ELECT"] == "true" and env["CARVE_POLICY"] == "default"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    sa = one(objects, "ServiceAccount", of="controller")["metadata"]["name"]
    assert pod["serviceAccountName"] == sa
    binding = one(objects, "ClusterRoleBinding", of="controller")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]


def test_every_carve_variable_of_the_deployment_is_a_controller_flag():
    (c,) = one(render(), "Deployment", of="controller")["spec"]["template"]["spec"]["containers"]
    parser = build_parser("controller")
    sub = next(a for a in parser._actions if a.dest == "command").choices["controller"]
    twins = {env_twin(o) for a in sub._actions for o in a.option_strings if o.startswith("--")}
    carve_vars = {e["name"] for e in c["env"] if e["name"].startswith("CARVE_")}
    assert carve_vars and carve_vars <= twins


def test_the_layout_choice_is_configured_through_its_flags_env_twins():
    # The chart's defaults are the controller's own; a value set reaches the flag the controller parses.
    parser = build_parser("controller")
    defaults = parser.parse_args(["controller"])
    (c,) = one(render(), "Deployment", of="controller")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert float(env["CARVE_LAYOUT_INTERVAL"]) == defaults.layout_interval
    assert float(env["CARVE_LAYOUT_WINDOW"]) == defaults.layout_window
    assert env["CARVE_OBJECTIVE"] == defaults.objective
    assert int(env["CARVE_SEARCH_BUDGET"]) == defaults.search_budget
    (c,) = one(
        render("--set", "controller.objective=gpus", "--set", "controller.layoutInterval=0"), "Deployment",
        of="controller",
    )["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["CARVE_OBJECTIVE"], env["CARVE_LAYOUT_INTERVAL"]) == ("gpus", "0")


def test_a_bad_objective_is_refused_by_the_values_schema():
    with pytest.raises(RenderError, match="objective"):
        render("--set", "controller.objective=cheapest")


def test_the_default_policy_is_valid_for_its_crd_and_the_model():
    objects = render()
    policy = one(objects, "PartitioningPolicy", of="controller")
    crd = yaml.safe_load((REPO / "helm/carve/crds/partitioningpolicies.carve.dev.yaml").read_text())
    jsonschema.validate(policy, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    spec = parse_policy(policy)
    assert spec.rule_for({}).default_strategy == "soft"
    assert spec.hysteresis.min_hold_s == 600


def test_isolated_namespaces_get_an_admission_policy_from_the_same_selector():
    objects = render("--set", "partitioningPolicy.spec.isolation.namespaceSelector.matchLabels.tier=tenant")
    vaps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    iso = vaps["carve-hardware-isolation"]
    selector = one(objects, "PartitioningPolicy", of="controller")["spec"]["isolation"]["namespaceSelector"]
    assert iso["spec"]["matchConstraints"]["namespaceSelector"] == selector
    assert selector["matchLabels"]["tier"] == "tenant"
    rules = iso["spec"]["matchConstraints"]["resourceRules"][0]
    assert rules["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    shared = next(v for v in iso["spec"]["variables"] if v["name"] == "shared")
    assert "vgpu.carve.dev" in shared["expression"]
    bindings = {o["spec"]["policyName"] for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(vaps) <= bindings


def test_no_isolation_selector_no_isolation_policy():
    objects = render("--set", "partitioningPolicy.spec.isolation.namespaceSelector=null")
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    assert "carve-hardware-isolation" not in names and "carve-nodepartitioning-status" in names


def test_the_controller_can_be_turned_off():
    objects = render("--set", "controller.enabled=false")
    assert not [o for o in objects if o["kind"] in ("Deployment", "PartitioningPolicy", "Role")]
    assert not [o for o in objects if o["metadata"]["name"] == "carve-hardware-isolation"]


def test_the_plugin_role_grants_exactly_its_node_partitioning_calls():
    # The process-level test (tests/integration/plugin/test_plugin_rbac.py) records them; this one reads
    # them from driver/plugin/mig/partitioning.py.
    granted = {r for r in rules_of(render()) if r[1].startswith("nodepartitionings")}
    assert granted == plugin_partitioning_calls()
    assert ("carve.dev", "nodepartitionings/status", "update") in granted


def _np(name: str) -> dict:
    return {
        "apiVersion": "carve.dev/v1alpha1",
        "kind": "NodePartitioning",
        "metadata": {"name": name},
        "spec": {"gpus": []},
        "status": {"observedGeneration": 1},
    }


def test_the_status_policy_lets_a_node_write_only_its_own_status():
    from support.admission import AdmissionRequest, evaluators

    policy = evaluators(render())["carve-nodepartitioning-status"]
    plugin = f"system:serviceaccount:{NAMESPACE}:carve-kubelet-plugin"
    on_a = {"authentication.kubernetes.io/node-name": ["node-a"]}

    def write(name: str, sub: str = "status", user: str = plugin, extra: dict | None = on_a):
        resource = "nodepartitionings" + (f"/{sub}" if sub else "")
        return policy.admit(
            AdmissionRequest(
                "UPDATE",
                "carve.dev",
                "v1alpha1",
                resource,
                user,
                extra or {},
                object=_np(name),
                old_object=_np(name),
                sub_resource=sub,
                name=name,
            )
        )

    own = write("node-a")
    assert own.matched and own.allowed and not own.errors
    other = write("node-b")
    assert not other.allowed and "not of 'node-b'" in other.denials[0]
    spec = write("node-a", sub="")
    assert any("never its spec" in d for d in spec.denials)
    assert any("no node association" in d for d in write("node-a", extra={}).denials)
    assert not write("node-b", user="system:serviceaccount:carve-system:carve-controller").matched


def test_the_isolation_policy_refuses_shared_classes_in_claims_and_templates():
    from support.admission import AdmissionRequest, evaluators

    policy = evaluators(render())["carve-hardware-isolation"]

    def create(resource: str, spec: dict):
        obj = {
            "metadata": {"name": "x", "namespace": "tenant"},
            "spec": {"spec": spec} if resource == "resourceclaimtemplates" else spec,
        }
        return policy.admit(
            AdmissionRequest(
                "CREATE", "resource.k8s.io", "v1", resource, "someone", object=obj, namespace="tenant"
            )
        )

    def claim(*classes: str, first_available: bool = False) -> dict:
        if first_available:
            req = {
                "name": "g",
                "firstAvailable": [{"name": f"a{i}", "deviceClassName": c} for i, c in enumerate(classes)],
            }
        else:
            req = {"name": "g", "exactly": {"deviceClassName": classes[0]}}
        return {"devices": {"requests": [req]}}

    for resource in ("resourceclaims", "resourceclaimtemplates"):
        assert create(resource, claim("mig.carve.dev")).allowed
        assert create(resource, claim("gpu.carve.dev", "mig.carve.dev", first_available=True)).allowed
        denied = create(resource, claim("vgpu.carve.dev"))
        assert not denied.allowed and "requires hardware isolation" in denied.denials[0]
        for shared in ("mps.carve.dev", "vgpu-strict.carve.dev"):  # shared GPUs, whoever enforces memory
            assert not create(resource, claim(shared)).allowed
        assert not create(
            resource, claim("mig.carve.dev", "timeslice.carve.dev", first_available=True)
        ).allowed
        assert not create(resource, claim("slot.carve.dev")).errors
    assert create("resourceclaims", {"devices": {}}).allowed  # no requests: nothing to refuse
