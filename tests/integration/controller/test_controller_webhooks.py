"""The controller's admission webhooks over real HTTPS (driver/admission.py): AdmissionReview v1 in,
the budget refusal and the HAMi conversion's JSONPatch out, as the API server would call them; the patch
applied to the pod gives the converted pod; bad bodies, unknown paths and oversize bodies are answered with
an HTTP error, never a dead server."""

from __future__ import annotations

import base64
import copy
import http.client
import json
import ssl

import pytest

from driver import names
from driver.admission import MAX_BODY, AdmissionServer
from driver.convert.hami import GpuModel
from driver.convert.webhook import HamiMutator, TemplateError
from driver.quota.webhook import BudgetCheck
from e2e.cluster.certs import CA

GI = 1 << 30


def namespace(**labels: str) -> dict:
    return {
        "metadata": {"name": "team-a", "labels": {f"budget.gpu.carve.dev/{k}": v for k, v in labels.items()}}
    }


def share_claim(name: str, memory: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": names.CLASS_VGPU,
                            "capacity": {"requests": {"memory": memory}},
                        },
                    }
                ]
            }
        },
    }


def hami_pod() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "web-", "namespace": "team-a", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {names.LEGACY_GPU: "1", names.LEGACY_GPUMEM_PERCENTAGE: "25"}},
                }
            ]
        },
    }


def review(resource: str, obj: dict, dry_run: bool = False) -> dict:
    group = "" if resource == "pods" else "resource.k8s.io"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "operation": "CREATE",
            "namespace": "team-a",
            "resource": {"group": group, "version": "v1", "resource": resource},
            "object": obj,
            "dryRun": dry_run,
        },
    }


@pytest.fixture
def served(tmp_path):
    ca = CA(tmp_path)
    pair = ca.issue("webhooks", "127.0.0.1", server=True, ips=("127.0.0.1",))
    claims = [share_claim("a", "6Gi")]
    created: list[tuple[str, dict]] = []

    def ensure(ns: str, obj: dict) -> None:
        if obj["metadata"]["name"] in [o["metadata"]["name"] for _, o in created]:
            return
        if ns == "refused":
            raise TemplateError('admission webhook "memory.budget.gpu.carve.dev" denied the request')
        created.append((ns, obj))

    check = BudgetCheck(
        claims=lambda: claims,
        namespace=lambda n: namespace(memory="10Gi"),
        namespaces=lambda: [namespace(memory="10Gi")],
    )
    mutator = HamiMutator(
        models=lambda: (GpuModel("NVIDIA A100-SXM4-80GB", 80 * GI),), ensure_template=ensure
    )
    routes = {
        "/validate-budget/memory": lambda r: check.review(r, ("memory",)),
        "/mutate-hami": mutator.review,
    }
    server = AdmissionServer("127.0.0.1:0", routes, str(pair.cert), str(pair.key)).start()
    ctx = ssl.create_default_context(cafile=str(ca.path))

    def post(path: str, body: bytes | dict, headers: dict | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")

    yield post, created
    server.stop()


def apply(obj: dict, patch: list[dict]) -> dict:
    """JSONPatch add/replace (the ops the webhook emits)."""
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] in ("add", "replace"), op
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for p in parents:
            target = target[p]
        target[last] = op["value"]
    return out


def test_a_claim_over_the_namespace_budget_is_refused_over_https(served):
    post, _ = served
    status, body = post("/validate-budget/memory", review("resourceclaims", share_claim("b", "5Gi")))
    assert status == 200
    response = body["response"]
    assert response["uid"] == "u-1" and response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"].startswith(
        "namespace team-a: GPU memory budget exceeded: ResourceClaim b asks 5Gi"
    )
    assert "4Gi remains" in response["status"]["message"]
    status, body = post("/validate-budget/memory", review("resourceclaims", share_claim("b", "4Gi")))
    assert body["response"]["allowed"] is True


def test_a_hami_pod_comes_back_as_a_pod_with_a_claim_and_its_template_is_created(served):
    post, created = served
    pod = hami_pod()
    status, body = post("/mutate-hami", review("pods", pod))
    assert status == 200 and body["response"]["allowed"] is True
    assert body["response"]["patchType"] == "JSONPatch"
    patched = apply(pod, json.loads(base64.b64decode(body["response"]["patch"])))
    (c,) = patched["spec"]["containers"]
    assert c["resources"] == {"claims": [{"name": "main-gpu"}]}
    (rc,) = patched["spec"]["resourceClaims"]
    ((ns, template),) = created
    assert ns == "team-a" and rc["resourceClaimTemplateName"] == template["metadata"]["name"]
    sub = template["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"][0]
    assert sub["capacity"]["requests"]["memory"] == f"{80 * 1024 // 4}Mi"
    assert json.loads(patched["metadata"]["annotations"][names.CONVERTED_ANNOTATION]) == {
        "main": {names.LEGACY_GPU: "1", names.LEGACY_GPUMEM_PERCENTAGE: "25"}
    }
    # A second pod with the same ask shares the template; a dry run creates nothing.
    post("/mutate-hami", review("pods", hami_pod()))
    post("/mutate-hami", review("pods", hami_pod(), dry_run=True))
    assert len(created) == 1


def test_a_pod_whose_template_is_refused_is_refused_with_that_reason(served):
    post, _ = served
    req = review("pods", hami_pod())
    req["request"]["namespace"] = "refused"
    status, body = post("/mutate-hami", req)
    assert status == 200 and body["response"]["allowed"] is False
    assert "denied the request" in body["response"]["status"]["message"]
    assert "container main: ResourceClaimTemplate refused/hami-" in body["response"]["status"]["message"]


def test_a_bad_hami_spec_is_refused_naming_the_field(served):
    post, _ = served
    pod = hami_pod()
    pod["spec"]["containers"][0]["resources"]["limits"][names.LEGACY_GPUCORES] = "lots"
    _, body = post("/mutate-hami", review("pods", pod))
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["message"] == (
        "carve HAMi conversion: pod team-a/web-: spec.containers[0]: container main: nvidia.com/gpucores: "
        "'lots' is not a quantity"
    )


@pytest.mark.parametrize(
    ("path", "body", "headers", "status"),
    [
        ("/nowhere", {}, None, 404),
        ("/mutate-hami", b"not json", None, 400),
        ("/mutate-hami", {"kind": "Pod"}, None, 400),
        ("/mutate-hami", b"{}", {"Content-Length": str(MAX_BODY + 1)}, 413),
    ],
)
def test_bad_requests_get_an_http_error_and_the_server_keeps_serving(served, path, body, headers, status):
    post, _ = served
    got, _ = post(path, body, headers)  # an over-limit declared length is refused before the body is read
    assert got == status
    ok, answer = post("/validate-budget/memory", review("resourceclaims", share_claim("c", "1Gi")))
    assert ok == 200 and answer["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--webhook-addr", "8443", "--budget-webhook"], "--webhook-addr '8443': expected [host]:port"),
        (["--webhook-addr", ":8443"], "no webhook to serve: add --budget-webhook or --hami-webhook"),
        (["--hami-webhook"], "--budget-webhook/--hami-webhook need --webhook-addr"),
        (["--webhook-addr", ":8443", "--budget-webhook", "--webhook-cert", "c.pem"], "go together"),
    ],
)
def test_bad_webhook_flags_are_usage_errors(args, message, capsys):
    from driver.cli import main

    assert main(["controller", *args]) == 2
    assert message in capsys.readouterr().err
