"""The chart's monitoring on real data (issue 19): a real Prometheus (Debian's `prometheus`,
e2e/cluster/prometheus.py) scrapes every node's carve plugin and the strategy controller each second and
loads the chart's alert rules; a pod holding a soft slice (gates off: a slot) runs on e2e-n1 and, in a real
container, is refused an allocation over its quota. Then every query of every panel of the shipped Grafana
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
from e2e.cluster.prometheus import Prometheus, Target
from e2e.cluster.versions import REPO
from tests.support.dashboard import PanelQuery, panel_queries

N1 = "e2e-n1"  # the soft GPUs (gates off: slots) of the session cluster
RULES = REPO / "helm" / "carve" / "monitoring" / "carve-rules.yaml"
QUOTA = 2 * 1024**3  # kube.soft_or_slot's memory request
MiB = 1024**2
CUDA_ERROR_OUT_OF_MEMORY = 2
DATA_TIMEOUT_S = 60.0


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
def prometheus(cluster, controller):
    plugins = [n for n in cluster.nodes.values() if n.plugin is not None and n.plugin.alive()]
    assert plugins and all(n.metrics_port for n in plugins), "the host-process plugins serve no metrics"
    targets = [Target("carve-plugin", f"127.0.0.1:{n.metrics_port}", {"node": n.name}) for n in plugins]
    targets.append(Target("carve-controller", f"127.0.0.1:{controller.metrics_port}"))
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

    kube.wait("Prometheus scraping every plugin and the controller", all_up, timeout_s=30)
    yield prom
    prom.stop()


@pytest.fixture(scope="module")
def workload(cluster, api, prometheus, gates_on):
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
        yield namespace
    finally:
        kube.delete_namespace(api, namespace, claims=True)


def _values(samples: list[dict]) -> list[float]:
    return [float(s["value"][1]) for s in samples]


def _answers(prometheus: Prometheus, queries: list[PanelQuery]) -> dict[PanelQuery, list[dict]]:
    return {q: prometheus.query(q.promql) for q in queries}


def _empty(answers: dict[PanelQuery, list[dict]]) -> list[PanelQuery]:
    """Queries with no sample, or only NaN ones (histogram_quantile over no observations): nothing drawn."""
    return [q for q, samples in answers.items() if not any(not math.isnan(v) for v in _values(samples))]


def test_every_dashboard_query_returns_data(cluster, prometheus, workload, gates_on):
    namespace = workload
    queries = panel_queries()
    assert {q.panel for q in queries} >= {"GPUs by strategy", "Prepare latency", "Unhealthy GPUs"}
    deadline = time.monotonic() + DATA_TIMEOUT_S
    while True:
        answers = _answers(prometheus, queries)
        empty = _empty(answers)
        ours = [
            s
            for s in answers[_query(queries, "OOM refusals")]
            if (s["metric"].get("pod_namespace"), s["metric"].get("pod")) == (namespace, "held")
        ]
        oom_seen = cluster.runtime != "containerd" or any(v > 0 for v in _values(ours))
        if (not empty and oom_seen) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not empty, (
        "dashboard queries that return no data on a cluster with a running claim:\n"
        + "\n".join(f"  {q.where}: {q.promql}" for q in empty)
    )

    # What the panels show is the cluster as it is.
    plugins = [n for n in cluster.nodes.values() if n.plugin is not None and n.plugin.alive()]
    gpus = answers[_query(queries, "GPUs by strategy")]
    assert sum(_values(gpus)) == sum(_gpu_count(n.spec.gpus) for n in plugins), gpus
    if gates_on:
        assert {s["metric"]["strategy"] for s in gpus} >= {"mig", "soft", "exclusive", "timeslice", "slots"}
    limits = answers[_query(queries, "Memory used vs limit per pod", "B")]
    held = [
        s for s in limits if (s["metric"].get("pod_namespace"), s["metric"].get("pod")) == (namespace, "held")
    ]
    assert len(held) == 1, f"no memory limit series of pod {namespace}/held: {limits}"
    limit = float(held[0]["value"][1])
    assert limit == QUOTA if gates_on else limit > 0, held  # gates off: a slot's share of its GPU
    if cluster.runtime == "containerd":
        assert oom_seen, f"the refused allocation of {namespace}/held is not in 'OOM refusals': {ours}"
    unhealthy = answers[_query(queries, "Unhealthy GPUs")]
    assert len(unhealthy) == len(plugins) and set(_values(unhealthy)) == {0.0}, unhealthy
    pending = answers[_query(queries, "Pending claims")]
    assert {s["metric"]["reason"] for s in pending} == set(PENDING_REASONS), pending
    changes = answers[_query(queries, "Strategy changes")]
    assert {s["metric"]["strategy"] for s in changes} == set(STRATEGY_NAMES), changes
    latency = _values(answers[_query(queries, "Prepare latency", "B")])
    assert latency and all(0 < v <= 60 for v in latency), latency


def _query(queries: list[PanelQuery], panel: str, ref_id: str = "A") -> PanelQuery:
    return next(q for q in queries if (q.panel, q.ref_id) == (panel, ref_id))


def test_every_alert_expression_evaluates(prometheus, workload):
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
    # A healthy cluster raises nothing: not even a pending alert.
    active = [(a["labels"]["alertname"], a["state"], a["labels"]) for a in prometheus.api("alerts")["alerts"]]
    assert not active, active
