"""The chart as operators run it: resources on every container, the legacy scheduler's placement values and
its extender's probes, PodDisruptionBudgets, metrics Services and the optional Prometheus monitor, strategy
rules under --set without escaping, a numeric image tag, and NOTES.txt."""

from __future__ import annotations

import pytest
from helm_render import CHART, NAMESPACE, RenderError, render, run_helm

LEGACY = ("--set", "legacy.enabled=true")


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def _workloads(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] in ("DaemonSet", "Deployment")]


def _by_name(objects: list[dict], kind: str, suffix: str) -> dict:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def test_every_container_has_resources_by_default() -> None:
    objects = render(*LEGACY)
    containers = [
        (w["metadata"]["name"], c["name"])
        for w in _workloads(objects)
        for c in w["spec"]["template"]["spec"].get("initContainers", [])
        + w["spec"]["template"]["spec"]["containers"]
        if not (c.get("resources") or {}).get("requests") or "memory" not in c["resources"].get("limits", {})
    ]
    assert containers == []
    assert len(_workloads(objects)) == 4  # plugin, controller, legacy device plugin, legacy scheduler


def test_resources_can_be_set_per_component() -> None:
    objects = render(
        *LEGACY,
        "--set",
        "legacy.extender.resources.limits.memory=1Gi",
        "--set",
        "plugin.resources.requests.cpu=1",
    )
    scheduler = _by_name(objects, "Deployment", "-legacy-scheduler")
    extender = next(c for c in scheduler["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")
    assert extender["resources"]["limits"]["memory"] == "1Gi"
    plugin = _by_name(objects, "DaemonSet", "-kubelet-plugin")
    assert plugin["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == 1


def test_the_legacy_scheduler_takes_placement_values() -> None:
    objects = render(
        *LEGACY,
        "--set",
        "legacy.scheduler.priorityClassName=high",
        "--set",
        "legacy.scheduler.nodeSelector.pool=infra",
        "--set",
        "legacy.scheduler.tolerations[0].key=infra",
        "--set",
        "legacy.scheduler.tolerations[0].operator=Exists",
        "--set",
        "legacy.scheduler.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
        "--set",
        "legacy.scheduler.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=kubernetes.io/hostname",
    )
    spec = _by_name(objects, "Deployment", "-legacy-scheduler")["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "high"
    assert spec["nodeSelector"] == {"pool": "infra"}
    assert spec["tolerations"] == [{"key": "infra", "operator": "Exists"}]
    assert (
        spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"]
        == 1
    )
    default = _by_name(render(*LEGACY), "Deployment", "-legacy-scheduler")["spec"]["template"]["spec"]
    assert default["priorityClassName"] == "system-cluster-critical"


def test_the_extender_sidecar_has_health_and_readiness_probes_on_its_metrics_port() -> None:
    spec = _by_name(render(*LEGACY), "Deployment", "-legacy-scheduler")["spec"]["template"]["spec"]
    extender = next(c for c in spec["containers"] if c["name"] == "extender")
    assert _env(extender)["CARVE_METRICS_ADDR"] == ":8081"
    assert _env(extender)["CARVE_ADDR"].startswith("127.0.0.1:")  # the verbs stay on loopback
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in extender["ports"]
    assert extender["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert extender["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    off = _by_name(
        render(*LEGACY, "--set", "legacy.extender.metricsPort=0"), "Deployment", "-legacy-scheduler"
    )
    extender = next(c for c in off["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")
    assert "readinessProbe" not in extender and "CARVE_METRICS_ADDR" not in _env(extender)


def test_the_legacy_device_plugin_serves_metrics_and_probes() -> None:
    ds = _by_name(render(*LEGACY), "DaemonSet", "-legacy-device-plugin")
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert _env(c)["CARVE_METRICS_ADDR"] == ":8082"
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_pod_disruption_budgets_only_for_more_than_one_replica() -> None:
    pdbs = {o["metadata"]["name"]: o for o in render(*LEGACY) if o["kind"] == "PodDisruptionBudget"}
    assert set(pdbs) == {"carve-controller", "carve-legacy-scheduler"}
    assert pdbs["carve-controller"]["spec"] == {
        "maxUnavailable": 1,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "carve",
                "app.kubernetes.io/instance": "carve",
                "app.kubernetes.io/component": "controller",
            }
        },
    }
    single = render(*LEGACY, "--set", "controller.replicas=1", "--set", "legacy.scheduler.replicas=1")
    assert [o for o in single if o["kind"] == "PodDisruptionBudget"] == []


def test_a_metrics_service_per_component_selects_its_pods() -> None:
    objects = render(*LEGACY)
    services = {
        o["metadata"]["name"]: o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["labels"].get("carve.dev/metrics") == "true"
    }
    assert set(services) == {
        "carve-kubelet-plugin-metrics",
        "carve-controller-metrics",
        "carve-legacy-device-plugin-metrics",
        "carve-legacy-scheduler-metrics",
    }
    for svc in services.values():
        pods = [
            w
            for w in _workloads(objects)
            if all(
                w["spec"]["template"]["metadata"]["labels"].get(k) == v
                for k, v in svc["spec"]["selector"].items()
            )
        ]
        assert len(pods) == 1, svc["metadata"]["name"]
        ports = [
            p
            for c in pods[0]["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
            if p["name"] == "metrics"
        ]
        assert [p["containerPort"] for p in ports] == [svc["spec"]["ports"][0]["port"]]
    assert not [
        o
        for o in render(*LEGACY, "--set", "metrics.services=false")
        if o["kind"] == "Service" and o["metadata"]["labels"].get("carve.dev/metrics")
    ]


def test_the_monitor_renders_only_when_asked_or_when_the_api_is_served() -> None:
    assert not [o for o in render() if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    auto = render("--api-versions", "monitoring.coreos.com/v1")
    [sm] = [o for o in auto if o["kind"] == "ServiceMonitor"]
    assert sm["spec"]["selector"]["matchLabels"]["carve.dev/metrics"] == "true"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True  # the per-claim `pod` label survives the scrape
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    off = render(
        "--api-versions", "monitoring.coreos.com/v1", "--set", "metrics.serviceMonitor.enabled=false"
    )
    assert not [o for o in off if o["kind"] == "ServiceMonitor"]
    pod = render(
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.kind=PodMonitor",
        "--set",
        "metrics.serviceMonitor.labels.release=prom",
    )
    [pm] = [o for o in pod if o["kind"] == "PodMonitor"]
    assert pm["metadata"]["labels"]["release"] == "prom"
    assert pm["spec"]["podMetricsEndpoints"][0]["interval"] == "30s"


def _plugin_env(objects) -> dict[str, str]:
    return _env(
        _by_name(objects, "DaemonSet", "-kubelet-plugin")["spec"]["template"]["spec"]["containers"][0]
    )


def test_strategy_rules_as_a_list_need_no_escaping() -> None:
    objects = render(
        "--set",
        "plugin.strategyRules[0]=*A100*=mig",
        "--set",
        "plugin.strategyRules[1]=T4=soft",
        "--set",
        "plugin.strategyRules[2]=exclusive",
    )
    assert _plugin_env(objects)["CARVE_STRATEGY"] == "*A100*=mig,T4=soft,exclusive"
    controller = _by_name(objects, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]
    assert _env(controller)["CARVE_PLUGIN_STRATEGY"] == "*A100*=mig,T4=soft,exclusive"
    assert _plugin_env(render("--set", "plugin.strategy=mig"))["CARVE_STRATEGY"] == "mig"


def test_the_fallback_strategy_reaches_the_plugin_and_mig_is_refused() -> None:
    assert _plugin_env(render())["CARVE_FALLBACK_STRATEGY"] == "soft"
    assert (
        _plugin_env(render("--set", "plugin.fallbackStrategy=exclusive"))["CARVE_FALLBACK_STRATEGY"]
        == "exclusive"
    )
    with pytest.raises(RenderError, match="fallbackStrategy"):
        render("--set", "plugin.fallbackStrategy=mig")


def test_a_strategy_with_a_stray_comma_is_refused_by_the_schema() -> None:
    with pytest.raises(RenderError, match="strategy"):
        render("--set-string", "plugin.strategy=0=mig\\,\\,soft")


def test_a_numeric_image_tag_is_taken_as_its_string() -> None:
    objects = render("--set", "image.tag=1")
    images = {c["image"] for w in _workloads(objects) for c in w["spec"]["template"]["spec"]["containers"]}
    assert images == {"localhost/carve:1"}
    assert {
        c["image"]
        for w in _workloads(render("--set", "image.tag=1.5"))
        for c in w["spec"]["template"]["spec"]["containers"]
    } == {"localhost/carve:1.5"}


def test_notes_say_what_to_check_after_install() -> None:
    done = run_helm(
        "install",
        "carve",
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        "--set",
        "plugin.strategy=mig",
    )
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    for check in (
        "rollout status daemonset/carve-kubelet-plugin",
        "ImagePullBackOff",
        "DRAConsumableCapacity",
        "CDI",
        "kubectl get resourceslices",
        "reason=StrategyFallback",
        "strategy rules: mig",
        ".status.gpus[*].source",
    ):
        assert check in notes, check


@pytest.mark.parametrize(
    "values",
    [
        (),
        LEGACY,
        ("--set", "metrics.serviceMonitor.enabled=true"),
        ("--set", "plugin.strategyRules[0]=0=mig"),
    ],
)
def test_helm_lint_strict_passes(values) -> None:
    done = run_helm("lint", "--strict", str(CHART), *values)
    assert done.returncode == 0, done.stdout + done.stderr
