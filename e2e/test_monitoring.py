"""The chart's monitoring on real data (issue 19): a real Prometheus (Debian's `prometheus`,
e2e/cluster/prometheus.py) scrapes every node's carve plugin, the strategy controller and the legacy shim's
device plugin and extender each second and loads the chart's alert rules; a pod holding a soft slice (gates
off: a slot) runs on e2e-n1 and, in a real container, is refused an allocation over its quota; a pod on the
legacy shim asks for 4096 MiB and 30 % of a GPU. Then every query of every panel of the shipped Grafana
dashboard (helm/carve/monitoring/carve-dashboard.json, Grafana variables replaced as
tests/support/dashboard.py documents) must return data, and every alert expression must evaluate without
error, as a query and as a rule Prometheus runs.

A panel that shows nothing on a working cluster fails here, naming the panel: series that only appear on
an event are exported at 0 from the start by carve (docs/metrics.md), not papered over in the queries."""

from __future__ import annotations

import math
import shutil
import time
import uuid

import pytest
import yaml
from kubernetes import client

from api.v1alpha1.partitioning import STRATEGY_NAMES
from driver import names
from driver.controller.metrics import PENDING_REASONS
from e2e import kube
from e2e.cluster.controller import StrategyController
from e2e.cluster.legacy import LEGACY_NODE, LegacyShim
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.prometheus import Prometheus, Target
from e2e.cluster.versions import REPO
from tests.support.dashboard import PanelQuery, panel_queries

N1 = "e2e-n1"  # the soft GPUs (gates off: slots) of the session cluster
RULES = REPO / "helm" / "carve" / "monitoring" / "carve-rules.yaml"
QUOTA = 2 * 1024**3  # kube.soft_or_slot's memory request
MiB = 1024**2
CUDA_ERROR_OUT_OF_MEMORY = 2
DATA_TIMEOUT_S = 60.0
LEGACY_MEM_MIB, LEGACY_CORES = 4096, 30  # the legacy pod's gpumem, gpucores
SHIM_NODE = NodeSpec("e2e-l3", LEGACY_NODE.gpus, LEGACY_NODE.strategy)


def _gpu_count(gpus: str) -> int:
    """GPUs of a `--gpus fake:2xA100-80GB,1xT4` spec."""
    return sum(int(part.split("x", 1)[0]) for part in gpus.removeprefix("fake:").split(","))


@pytest.fixture(scope="module")
def controller(cluster):
    t0 = time.monotonic()
    sc = StrategyController(cluster).start()
    print(f"\ne2e: controller node and carve controller up in {time.monotonic() - t0:.1f}s")
    yield sc
    sc.stop()


@pytest.fixture(scope="module")
def legacy(cluster):
    t0 = time.monotonic()
    # A node of its own: test_legacy.py's e2e-l1 came and went in this session, and its root directory
    # (the kubelet's device-manager checkpoint, the device plugin's log) is still there.
    shim = LegacyShim(cluster, spec=SHIM_NODE)
    try:
        shim.start()
    except Exception as e:
        pytest.fail(f"e2e: the legacy shim did not start (logs in {cluster.root / 'logs'}): {e}")
    print(
        f"\ne2e: legacy node, device plugin, extender and carve-scheduler up in {time.monotonic() - t0:.1f}s"
    )
    yield shim
    shim.stop()


@pytest.fixture(scope="module")
def prometheus(cluster, controller, legacy):
    plugins = [n for n in cluster.nodes.values() if n.plugin is not None and n.plugin.alive()]
    assert plugins and all(n.metrics_port for n in plugins), "the host-process plugins serve no metrics"
    assert legacy.device_plugin_metrics_port and legacy.extender_metrics_port, (
        "the chart's legacy metrics are off"
    )
    targets = [Target("carve-plugin", f"127.0.0.1:{n.metrics_port}", {"node": n.name}) for n in plugins]
    targets += [
        Target("carve-controller", f"127.0.0.1:{controller.metrics_port}"),
        Target(
            "carve-legacy-device-plugin",
            f"127.0.0.1:{legacy.device_plugin_metrics_port}",
            {"node": SHIM_NODE.name},
        ),
        Target("carve-legacy-extender", f"127.0.0.1:{legacy.extender_metrics_port}"),
    ]
    root = cluster.root / "prometheus"
    root.mkdir(exist_ok=True)
    # The PrometheusRule's spec is a Prometheus rule file as it is (test_helm_monitoring checks the chart).
    shutil.copy(RULES, root / RULES.name)
    prom = Prometheus(root, cluster.sup)
    try:
        prom.start(targets, [root / RULES.name])
    except Exception as e:
        pytest.fail(f"e2e: Prometheus did not start (logs in {cluster.root / 'logs'}): {e}")

    def all_up():
        active = prom.api("targets", state="active")["activeTargets"]
        return len(active) == len(targets) and all(t["health"] == "up" for t in active)

    kube.wait("Prometheus scraping every plugin, the controller and the legacy shim", all_up, timeout_s=30)
    yield prom
    prom.stop()


@pytest.fixture(scope="module")
def workload(cluster, api, prometheus, legacy, gates_on):
    """A pod holding a soft slice (gates off: a slot) on e2e-n1, prepared while Prometheus scrapes (so the
    prepare is an increase of the latency histogram), and in a real container one allocation over its
    quota refused by the limiter (an OOM refusal after the scraper saw the claim's counter at 0)."""
    namespace = f"e2e-mon-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    pod = kube.pod("held", claim_template="held", node=N1)
    real = cluster.runtime == "containerd"
    if real:
        container = pod["spec"]["containers"][0]
        container["image"] = "e2e/glibc"  # has cuda-probe
        # The fake libcuda must describe the node's GPUs as its plugin's NVML does (test_containers.py).
        fake = {
            names.ENV_FAKE_GPUS: cluster.nodes[N1].spec.gpus.removeprefix("fake:"),
            names.ENV_FAKE_SEED: N1,
        }
        container["env"] = [{"name": k, "value": v} for k, v in fake.items()]
    try:
        kube.create(api, namespace, kube.template("held", kube.soft_or_slot(gates_on)))
        kube.create(api, namespace, pod)
        kube.wait_running(api, namespace, "held", timeout_s=120)
        if real:
            kube.wait(
                "Prometheus holding the claim's OOM refusal counter at 0",
                lambda: prometheus.query(
                    f'carve_claim_oom_refusals_total{{pod="held", pod_namespace="{namespace}"}}'
                ),
                timeout_s=DATA_TIMEOUT_S,
            )
            env = kube.container_env(cluster, namespace, "held")
            limit = int(env[f"{names.ENV_MEMORY_LIMIT}_0"])
            over = kube.cuda_probe(cluster, namespace, "held", limit + 64 * MiB)
            assert over["alloc"] == CUDA_ERROR_OUT_OF_MEMORY, f"over the quota of {limit} B: {over}"
        # A pod on the legacy shim: through carve-scheduler and the extender, its usage from the device
        # plugin under the DRA claims' names (docs/metrics.md, "Legacy device plugin").
        kube.create(api, namespace, kube.legacy_pod("shim", 1, LEGACY_MEM_MIB, LEGACY_CORES))
        kube.wait_running(api, namespace, "shim")
        yield namespace
    finally:
        kube.delete_namespace(api, namespace, claims=True)


def _values(samples: list[dict]) -> list[float]:
    return [float(s["value"][1]) for s in samples]


def _of_pod(samples: list[dict], namespace: str, pod: str) -> list[float]:
    return _values(
        [s for s in samples if (s["metric"].get("pod_namespace"), s["metric"].get("pod")) == (namespace, pod)]
    )


def _labels(samples: list[dict], label: str) -> set[str]:
    return {s["metric"].get(label, "") for s in samples}


def _query(queries: list[PanelQuery], panel: str, ref_id: str = "A") -> PanelQuery:
    return next(q for q in queries if (q.panel, q.ref_id) == (panel, ref_id))


def _problems(cluster, queries: list[PanelQuery], answers: dict, namespace: str, gates_on: bool) -> list[str]:
    """What is wrong with the dashboard's answers: first any query without data (no sample, or only NaN:
    histogram_quantile over no observations draws nothing), then what the panels should show of this
    cluster and its workload."""
    empty = [
        f"{q.where} returns no data: {q.promql}"
        for q, samples in answers.items()
        if all(math.isnan(v) for v in _values(samples))
    ]
    if empty:
        return empty

    def of(panel: str, ref_id: str = "A") -> list[dict]:
        return answers[_query(queries, panel, ref_id)]

    plugins = [n for n in cluster.nodes.values() if n.plugin is not None and n.plugin.alive()]
    limits = of("Memory used vs limit per pod", "B")
    held = _of_pod(limits, namespace, "held")
    used = ("Memory used vs limit per pod", "SM use vs cores")  # their queries A
    wanted: list[tuple[str, object, object]] = [
        (
            "GPUs by strategy: GPUs of all plugins",
            sum(_values(of("GPUs by strategy"))),
            sum(_gpu_count(n.spec.gpus) for n in plugins),
        ),
        # gates off: a slot, whose quota is its share of the GPU
        (
            "Memory used vs limit per pod: the soft claim's",
            held if gates_on else len(held),
            [QUOTA] if gates_on else 1,
        ),
        (
            "Memory used vs limit per pod: the legacy pod's",
            _of_pod(limits, namespace, "shim"),
            [LEGACY_MEM_MIB * MiB],
        ),
        (
            "SM use vs cores: the legacy pod's cores",
            _of_pod(of("SM use vs cores", "B"), namespace, "shim"),
            [LEGACY_CORES],
        ),
        (
            "Memory used vs limit, SM use vs cores: the used series of both pods",
            [len(_of_pod(of(panel), namespace, pod)) for panel in used for pod in ("held", "shim")],
            [1] * 4,
        ),
        ("Unhealthy GPUs: one 0 per plugin", sorted(_values(of("Unhealthy GPUs"))), [0.0] * len(plugins)),
        ("Pending claims: every reason", _labels(of("Pending claims"), "reason"), set(PENDING_REASONS)),
        (
            "Strategy changes: every strategy",
            _labels(of("Strategy changes"), "strategy"),
            set(STRATEGY_NAMES),
        ),
        (
            "Prepare latency: p99 within the buckets",
            all(0 < v <= 60 for v in _values(of("Prepare latency", "B"))),
            True,
        ),
    ]
    if gates_on:
        strategies = _labels(of("GPUs by strategy"), "strategy")
        wanted.append(
            (
                "GPUs by strategy: all five published",
                strategies >= {"mig", "soft", "exclusive", "timeslice", "slots"},
                True,
            )
        )
    if cluster.runtime == "containerd":
        refused = _of_pod(of("OOM refusals"), namespace, "held")
        wanted.append(("OOM refusals: the refused allocation", bool(refused) and refused[0] > 0, True))
    return [f"{what}: {got!r}, expected {want!r}" for what, got, want in wanted if got != want]


def test_every_dashboard_query_returns_data(cluster, prometheus, workload, gates_on):
    queries = panel_queries()
    assert {q.panel for q in queries} >= {"GPUs by strategy", "Prepare latency", "Unhealthy GPUs"}
    deadline = time.monotonic() + DATA_TIMEOUT_S
    while True:
        answers = {q: prometheus.query(q.promql) for q in queries}
        problems = _problems(cluster, queries, answers, workload, gates_on)
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1)
    for q, samples in answers.items():
        print(f"  {q.where}: {len(samples)} series, {sorted(_values(samples))[:6]}")
    assert not problems, "the dashboard on a cluster with running claims:\n" + "\n".join(problems)


def test_every_alert_expression_evaluates(prometheus, workload, gates_on):
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert len(rules) >= 8
    for r in rules:
        prometheus.query(r["expr"])  # raises with Prometheus's error on a bad expression

    def evaluated():
        loaded = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        return loaded if all(r["lastEvaluation"] > "0001-01-01T00:00:00Z" for r in loaded) else None

    loaded = kube.wait("Prometheus evaluating every carve rule", evaluated, timeout_s=30)
    assert {r["name"] for r in loaded} == {r["alert"] for r in rules}
    broken = [f"{r['name']}: {r['health']} {r.get('lastError', '')}" for r in loaded if r["health"] != "ok"]
    assert not broken, broken
    # A healthy cluster raises nothing: not even a pending alert. Gates off, the plugins say so (info).
    expected = set() if gates_on else {"CarveFeatureGateOff"}
    active = [(a["labels"]["alertname"], a["state"], a["labels"]) for a in prometheus.api("alerts")["alerts"]]
    assert not [a for a in active if a[0] not in expected], active
