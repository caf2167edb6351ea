"""The extender's /metrics: filter/bind latency, errors by a fixed kind, assignments, build info; the
series HAMi's scheduler users look for, under carve's names (docs/metrics.md)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from support.legacy_node import gpu_pod
from test_legacy_extender_http import GPU, MEM, cluster, get, post  # noqa: F401 (cluster: a fixture)


def samples(server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = get(server, "/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(got, name: str, **labels: str) -> float:
    return got.get((name, tuple(sorted(labels.items()))), 0.0)


def test_filter_bind_and_errors_are_counted(cluster) -> None:  # noqa: F811
    api, server = cluster
    api.add_pod(gpu_pod("p", [("main", {GPU: 1, MEM: 3000})]))
    pod = api.get_pod("team", "p")
    assert post(server, "/filter", {"Pod": pod, "NodeNames": ["n0", "n1"]})[0] == 200
    ok = post(server, "/bind", {"PodName": "p", "PodNamespace": "team", "PodUID": "uid-p", "Node": "n1"})
    assert ok == (200, {"Error": ""})
    refused = post(server, "/bind", {"PodName": "p", "PodNamespace": "team", "PodUID": "old", "Node": "n0"})
    assert refused[1]["Error"]
    assert post(server, "/filter", None, raw=b"{not json")[0] == 400
    got = samples(server)
    assert value(got, "carve_extender_request_duration_seconds_count", verb="filter") == 2
    assert value(got, "carve_extender_request_duration_seconds_count", verb="bind") == 2
    assert value(got, "carve_extender_assignments_total") == 1
    assert value(got, "carve_extender_errors_total", verb="bind", kind="refused") == 1
    assert value(got, "carve_extender_errors_total", verb="filter", kind="bad_request") == 1
    assert value(got, "carve_extender_errors_total", verb="bind", kind="internal") == 0
    build = [k for k in got if k[0] == "carve_build_info"]
    assert len(build) == 1 and ("component", "scheduler-extender") in build[0][1]


def test_unknown_paths_add_no_series(cluster) -> None:  # noqa: F811
    _api, server = cluster
    post(server, "/nope/../../x", {})
    verbs = {dict(k[1]).get("verb") for k in samples(server) if k[0].startswith("carve_extender_")}
    assert verbs <= {None, "filter", "prioritize", "bind"}
