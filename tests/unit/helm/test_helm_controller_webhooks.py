"""The controller's admission webhooks in the chart (namespaceBudgets, hamiWebhook): off by default; when on,
the Deployment serves them with the Secret's certificate, each configuration trusts that Secret's CA and
routes to a path the server has, the budget webhooks see only namespaces with their label, and RBAC grows by
exactly the calls they make."""

from __future__ import annotations

import base64

import pytest
from cryptography import x509
from helm_render import NAMESPACE, RenderError, render

from driver.cli import build_parser, env_twin

ON = ("--set", "namespaceBudgets.enabled=true", "--set", "hamiWebhook.enabled=true")
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def controller_env(objects) -> dict[str, str]:
    (dep,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "carve-controller"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in c["env"]}


def controller_rules(objects) -> set[tuple[str, str, str]]:
    (role,) = [
        o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "carve-controller"
    ]
    return {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_off_by_default():
    objects = render()
    assert not [o for o in objects if o["kind"] in WEBHOOK_KINDS and "controller" in o["metadata"]["name"]]
    assert not [k for k in controller_env(objects) if "WEBHOOK" in k]


def test_rbac_grows_by_exactly_the_webhooks_calls():
    extra = controller_rules(render(*ON)) - controller_rules(render())
    assert extra == {("", "namespaces", "get"), ("resource.k8s.io", "resourceclaimtemplates", "create")}
    only_budgets = controller_rules(render("--set", "namespaceBudgets.enabled=true")) - controller_rules(
        render()
    )
    assert only_budgets == {("", "namespaces", "get")}


def test_the_deployment_serves_the_webhooks_with_flags_the_controller_has():
    objects = render(*ON)
    env = controller_env(objects)
    assert env["CARVE_WEBHOOK_ADDR"] == ":8443"
    assert env["CARVE_BUDGET_WEBHOOK"] == "true" and env["CARVE_HAMI_WEBHOOK"] == "true"
    assert env["CARVE_BUDGET_CLASSES"] == "vgpu.carve.dev,vgpu-strict.carve.dev,mps.carve.dev"
    parser = build_parser("controller")
    sub = next(
        a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith("controller")
    )
    twins = {env_twin(o) for a in sub._actions for o in a.option_strings if o.startswith("--")}
    assert {k for k in env if k.startswith("CARVE_")} <= twins
    (dep,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "carve-controller"]
    pod = dep["spec"]["template"]["spec"]
    (vol,) = pod["volumes"]
    assert vol["secret"]["secretName"] == "carve-controller-webhooks"
    mount = pod["containers"][0]["volumeMounts"][0]["mountPath"]
    assert env["CARVE_WEBHOOK_CERT"] == f"{mount}/tls.crt" and env["CARVE_WEBHOOK_KEY"] == f"{mount}/tls.key"


def test_configurations_trust_the_secrets_ca_and_route_to_served_paths():
    objects = render(*ON)
    (secret,) = [
        o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "carve-controller-webhooks"
    ]
    ca = base64.b64decode(secret["data"]["ca.crt"])
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    assert f"carve-controller-webhooks.{NAMESPACE}.svc" in sans
    paths = set()
    for conf in [o for o in objects if o["kind"] in WEBHOOK_KINDS and "controller" in o["metadata"]["name"]]:
        for w in conf["webhooks"]:
            assert base64.b64decode(w["clientConfig"]["caBundle"]) == ca
            assert w["clientConfig"]["service"]["name"] == "carve-controller-webhooks"
            paths.add(w["clientConfig"]["service"]["path"])
    assert paths == {"/validate-budget/memory", "/validate-budget/cores", "/mutate-hami"}


def test_each_budget_webhook_sees_only_namespaces_with_its_label_and_fails_closed():
    (conf,) = [
        o
        for o in render(*ON)
        if o["kind"] == "ValidatingWebhookConfiguration" and o["metadata"]["name"].endswith("-budgets")
    ]
    for w in conf["webhooks"]:
        resource = w["clientConfig"]["service"]["path"].rsplit("/", 1)[1]
        assert w["namespaceSelector"] == {
            "matchExpressions": [{"key": f"budget.gpu.carve.dev/{resource}", "operator": "Exists"}]
        }
        assert w["failurePolicy"] == "Fail"
        assert w["rules"][0]["resources"] == ["resourceclaims", "resourceclaimtemplates"]
        assert w["rules"][0]["operations"] == ["CREATE"]


def test_the_hami_webhook_leaves_system_namespaces_alone_and_never_acts_on_dry_runs():
    (conf,) = [
        o
        for o in render(*ON)
        if o["kind"] == "MutatingWebhookConfiguration" and o["metadata"]["name"].endswith("-hami")
    ]
    (w,) = conf["webhooks"]
    assert w["sideEffects"] == "NoneOnDryRun" and w["failurePolicy"] == "Ignore"
    assert w["namespaceSelector"]["matchExpressions"][0]["values"] == [NAMESPACE, "kube-system"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--set", "namespaceBudgets.enabled=true", "--set", "controller.enabled=false"),
            "served by the controller",
        ),
        (
            (
                "--set",
                "hamiWebhook.enabled=true",
                "--set",
                "legacy.enabled=true",
                "--set",
                "legacy.webhook.enabled=true",
            ),
            "both rewrite the same HAMi pods",
        ),
    ],
)
def test_conflicting_values_are_refused(args, message):
    with pytest.raises(RenderError, match=message):
        render(*args)
