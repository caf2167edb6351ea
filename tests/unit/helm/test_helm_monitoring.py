"""The chart's monitoring: the Grafana dashboard ConfigMap, the PrometheusRule, the alert rules checked
and unit-tested by the real `promtool` (Debian's `prometheus` package; `make test` installs it through
hack/test_deps.sh), and every metric a panel or an alert uses is one carve exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helm_render import REPO, render
from support.dashboard import DashboardError, panel_queries

MONITORING = REPO / "helm" / "carve" / "monitoring"
RULES = MONITORING / "carve-rules.yaml"
DASHBOARD = MONITORING / "carve-dashboard.json"
PROMTOOL_TESTS = Path(__file__).parent / "promtool" / "carve-rules-test.yaml"
ON = ("--set", "monitoring.dashboards.enabled=true", "--set", "monitoring.rules.enabled=true")
# Metrics used by a panel or alert that another change in flight adds; each must be absent from the code
# here (the test fails once it lands, so the entry is removed then).
# Metrics a panel or alert may use before the component that exports them lands (none now).
PENDING_ELSEWHERE: dict[str, str] = {}


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.fail("promtool is missing: `make test-deps` (hack/test_deps.sh) installs Debian's prometheus")
    return found


def test_monitoring_is_off_by_default() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render()}
    assert ("PrometheusRule", "carve") not in kinds and ("ConfigMap", "carve-dashboard") not in kinds


def test_the_dashboard_configmap_is_labelled_for_the_grafana_sidecar() -> None:
    objects = render(*ON)
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "carve-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["carve-dashboard.json"]) == json.loads(DASHBOARD.read_text())


def test_the_prometheusrule_carries_the_checked_rules() -> None:
    (rule,) = [o for o in render(*ON, "--set", "monitoring.rules.labels.release=kps") if o["kind"] ==
               "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_fires_every_alert_on_its_series(tmp_path) -> None:
    shutil.copy(RULES, tmp_path / RULES.name)
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    done = subprocess.run([promtool(), "test", "rules", str(tmp_path / PROMTOOL_TESTS.name)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    fired = {a["alertname"] for t in tests for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert fired == alerts, f"alerts without a firing test: {sorted(alerts - fired)}"


_METRIC = re.compile(r"\bcarve_[a-z0-9_]+\b")
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def exported_metrics() -> set[str]:
    """Every carve_* name defined in the exporters' code, as Prometheus exposes it (counters _total,
    histograms _bucket/_sum/_count)."""
    names: set[str] = set()
    for path in (REPO / "driver").rglob("*.py"):
        names |= set(re.findall(r'"(carve_[a-z0-9_]+)"', path.read_text()))
    return names


def _base(name: str, known: set[str]) -> str:
    if name in known:
        return name
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in known:
            return name.removesuffix(suffix)
    return name


def used_metrics() -> set[str]:
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    return {m for e in exprs for m in _METRIC.findall(e)}


def test_every_metric_a_panel_or_alert_uses_is_exported() -> None:
    known = exported_metrics()
    assert "carve_claim_memory_used_bytes" in known and "carve_controller_changes" in known  # the scan works
    missing = sorted(m for m in used_metrics() if _base(m, known) not in known and m not in PENDING_ELSEWHERE)
    assert not missing, f"dashboard/alerts use metrics carve does not export: {missing}"
    landed = sorted(m for m in PENDING_ELSEWHERE if m in known)
    assert not landed, f"now exported, drop from PENDING_ELSEWHERE: {landed}"


def test_the_dashboard_has_the_panels_operators_asked_for() -> None:
    titles = {p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]}
    assert titles >= {"GPUs by strategy", "Memory used vs limit per pod", "SM use vs cores", "OOM refusals",
                      "Unenforced processes", "Pending claims", "Strategy changes", "Prepare latency"}


def test_every_panel_query_is_promql_that_promtool_parses(tmp_path) -> None:
    # Each panel query, its Grafana variables replaced as the e2e replaces them (support/dashboard.py),
    # as a recording rule: `promtool check rules` parses it with Prometheus's own parser.
    queries = panel_queries()
    assert len(queries) >= 9
    rules = [{"record": f"carve:panel_check:{i}", "expr": q.promql} for i, q in enumerate(queries)]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    done = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _dashboard(tmp_path, expr: str, variables: list[dict]) -> Path:
    path = tmp_path / "d.json"
    panel = {"title": "P", "targets": [{"refId": "A", "expr": expr}]}
    path.write_text(json.dumps({"panels": [panel], "templating": {"list": variables}}))
    return path


def test_grafana_variables_become_what_all_selects_and_fixed_windows(tmp_path) -> None:
    variables = [
        {"name": "datasource", "type": "datasource", "query": "prometheus"},
        {"name": "node", "type": "query", "query": "label_values(carve_gpus, node)"},
        {"name": "gpu", "type": "custom", "query": "a,b", "allValue": "GPU-.*"},
        {"name": "step", "type": "interval", "query": "1m,5m", "current": {"value": "5m"}},
    ]
    expr = 'rate(x{node=~"$node", gpu=~"${gpu:regex}"}[$__rate_interval]) * [[step]]'
    (q,) = panel_queries(_dashboard(tmp_path, expr, variables))
    assert q.promql == 'rate(x{node=~".+", gpu=~"GPU-.*"}[1m]) * 5m'
    assert (q.panel, q.ref_id, q.expr) == ("P", "A", expr)


def test_a_variable_the_dashboard_does_not_define_names_the_panel(tmp_path) -> None:
    with pytest.raises(DashboardError, match=r"panel 'P' query A: .* uses \$cluster"):
        panel_queries(_dashboard(tmp_path, 'up{cluster="$cluster"}', []))


def test_a_plugin_that_is_not_ready_stays_a_scrape_target() -> None:
    # Issue 29 (alert for a plugin that is down): without this a crash-looping plugin leaves the
    # endpoints and `up` has no series to be 0 on.
    (svc,) = [o for o in render() if o["kind"] == "Service" and o["metadata"]["name"].endswith(
        "-kubelet-plugin-metrics")]
    assert svc["spec"]["publishNotReadyAddresses"] is True


def test_the_operators_alerts_exist() -> None:
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert alerts >= {"CarvePrepareErrors", "CarveGPUModeChangePending", "CarvePluginDown",
                      "CarvePluginPodsUnavailable", "CarveFeatureGateOff", "CarveContainerToolkitUnsafe"}


def test_the_dashboard_filters_by_node_namespace_and_pod_and_maps_pods_to_gpus() -> None:
    # Issue 29: no filters, no pod -> GPU table, no physical memory or scheduling-failure panels.
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"node", "namespace", "pod"} <= set(variables)
    panels = {p["title"]: p for p in dashboard["panels"]}
    assert {"GPU physical memory", "Scheduling failures", "Pods and their GPUs"} <= set(panels)
    # Every per-pod panel narrows to the chosen pods, every per-GPU one to the chosen nodes.
    for p in dashboard["panels"]:
        for t in p["targets"]:
            if "carve_claim_" in t["expr"] and "carve_controller" not in t["expr"]:
                assert 'node=~"$node"' in t["expr"], (p["title"], t["expr"])
            if "by (pod_namespace, pod)" in t["expr"]:
                assert 'pod=~"$pod"' in t["expr"] and 'pod_namespace=~"$namespace"' in t["expr"], p["title"]
    table = panels["Pods and their GPUs"]
    assert table["type"] == "table" and table["targets"][0]["format"] == "table"
    expr = table["targets"][0]["expr"]
    assert "carve_gpu_info" in expr and "group_left (index, model)" in expr
    assert "carve_gpu_memory_bytes" in panels["GPU physical memory"]["targets"][0]["expr"]
