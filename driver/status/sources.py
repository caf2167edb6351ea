"""What `carve status` reads: API objects through the kubernetes client, metrics from the plugins.

Only GETs (list and get), which is what the chart's `carve-viewer` ClusterRole grants:
resourceslices and resourceclaims (resource.k8s.io), nodepartitionings (carve.dev), pods (get, list: the
consumers named by reservedFor, and the plugin pods) and pods/proxy (get: each plugin's /metrics through
the API server, so it works from a laptop that cannot reach pod IPs).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families
from urllib3.exceptions import HTTPError

from driver import names
from driver.errors import CliError
from driver.status.model import Sample

# Labels of the chart's kubelet-plugin DaemonSet pods; the metrics port is the container port named
# `metrics` (plugin.metricsPort in the chart).
PLUGIN_SELECTOR = "app.kubernetes.io/component=kubelet-plugin,app.kubernetes.io/name=carve"
METRICS_PORT_NAME = "metrics"
# A scrape is bounded in time and size: a status command must not hang on one node.
SCRAPE_TIMEOUT_S = 5.0
SCRAPE_MAX_BYTES = 16 << 20


@dataclass(frozen=True)
class MetricsEndpoint:
    node: str
    where: str  # for messages: `pod ns/name` or the URL


class ApiReader:
    def __init__(self, api_client: Any, timeout_s: float = 15.0) -> None:
        self.api = api_client
        self.timeout_s = timeout_s

    def get(self, path: str, query: dict[str, str] | None = None, raw: bool = False) -> Any:
        accept = "text/plain" if raw else "application/json"
        try:
            status, reason, data = self._request(path, list((query or {}).items()), accept)
        except ApiException as e:
            status, reason, data = e.status, e.reason, b""
        except (HTTPError, OSError) as e:
            raise CliError(f"GET {path}: cannot reach the API server: {e}") from None
        if status == 403:
            raise CliError(
                f"GET {path}: 403 forbidden; `carve status` needs the carve-viewer ClusterRole "
                "(helm/carve/templates/viewer-rbac.yaml)"
            )
        if not 200 <= int(status or 0) < 300:
            raise CliError(f"GET {path}: {status} {reason}")
        data = data[:SCRAPE_MAX_BYTES]
        if raw:
            return data.decode(errors="replace")
        try:
            return json.loads(data)
        except ValueError:
            raise CliError(f"GET {path}: the answer is not JSON") from None

    def _request(self, path: str, query: list[tuple[str, str]], accept: str) -> tuple[int, str, bytes]:
        """(status, reason, body) of one authenticated GET, for either generation of the client."""
        headers = {"Accept": accept}
        if hasattr(self.api, "param_serialize"):  # kubernetes >= 35: openapi-generator 7
            method, url, headers, _, _ = self.api.param_serialize(
                "GET", path, query_params=query, header_params=headers, auth_settings=["BearerToken"]
            )
            response = self.api.call_api(method, url, header_params=headers, _request_timeout=self.timeout_s)
            return response.status, response.reason or "", response.read() or b""
        response = self.api.call_api(
            path,
            "GET",
            query_params=query,
            header_params=headers,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=self.timeout_s,
        )
        return response.status, response.reason or "", response.data

    def items(self, path: str, query: dict[str, str] | None = None) -> list[dict[str, Any]]:
        return list(self.get(path, query).get("items") or [])

    def slices(self, node: str = "") -> list[dict[str, Any]]:
        selector = f"spec.driver={names.DRIVER_NAME}" + (f",spec.nodeName={node}" if node else "")
        return self.items("/apis/resource.k8s.io/v1/resourceslices", {"fieldSelector": selector})

    def claims(self, namespace: str = "") -> list[dict[str, Any]]:
        where = f"/namespaces/{quote(namespace)}" if namespace else ""
        return self.items(f"/apis/resource.k8s.io/v1{where}/resourceclaims")

    def budgeted_namespaces(self, name: str = "") -> list[dict[str, Any]]:
        """Namespaces with a GPU budget label (docs/quota.md): `name` alone, else one list per label."""
        if name:
            try:
                return [self.get(f"/api/v1/namespaces/{quote(name)}")]
            except CliError as e:
                if " 404 " in f" {e} ":
                    return []
                raise
        found: dict[str, dict[str, Any]] = {}
        for label in (names.BUDGET_MEMORY_LABEL, names.BUDGET_CORES_LABEL):
            for ns in self.items("/api/v1/namespaces", {"labelSelector": label}):
                found[(ns.get("metadata") or {}).get("name", "")] = ns
        return list(found.values())

    def partitionings(self) -> list[dict[str, Any]]:
        try:
            return self.items(f"/apis/{names.CRD_GROUP}/v1alpha1/nodepartitionings")
        except CliError as e:
            if " 404 " in f" {e} ":  # CRDs not installed (no controller): nobody but the plugin chose
                return []
            raise

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.get(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}")
        except CliError as e:
            if " 404 " in f" {e} ":
                return None  # gone since the claim was read
            raise

    def plugin_endpoints(self, selector: str = PLUGIN_SELECTOR) -> list[tuple[MetricsEndpoint, str]]:
        """(endpoint, API proxy path of its /metrics) for each running plugin pod with a metrics port."""
        out = []
        for pod in self.items("/api/v1/pods", {"labelSelector": selector}):
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            port = next(
                (
                    p.get("containerPort")
                    for c in spec.get("containers") or []
                    for p in c.get("ports") or []
                    if p.get("name") == METRICS_PORT_NAME
                ),
                None,
            )
            if port is None or (pod.get("status") or {}).get("phase") != "Running":
                continue
            ns, name = meta.get("namespace", ""), meta.get("name", "")
            out.append(
                (
                    MetricsEndpoint(spec.get("nodeName", ""), f"pod {ns}/{name}"),
                    f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}:{port}/proxy/metrics",
                )
            )
        return out


def parse_samples(text: str) -> list[Sample]:
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("carve_"):
                out.append(Sample(s.name, dict(s.labels), float(s.value)))
    return out


def fetch_url(url: str) -> str:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        return response.read(SCRAPE_MAX_BYTES).decode(errors="replace")


def scrape(reader: ApiReader | None, urls: Iterable[str], discover: bool) -> tuple[list[Sample], list[str]]:
    """Samples of every reachable plugin, and one note per plugin that could not be read."""
    samples: list[Sample] = []
    notes: list[str] = []
    for url in urls:
        try:
            samples += parse_samples(fetch_url(url))
        except (urllib.error.URLError, OSError, ValueError) as e:
            notes.append(f"metrics {url}: {getattr(e, 'reason', e)}")
    if discover and reader is not None:
        try:
            endpoints = reader.plugin_endpoints()
        except CliError as e:
            return samples, [*notes, f"plugin pods: {e}"]
        for endpoint, path in endpoints:
            try:
                samples += parse_samples(reader.get(path, raw=True))
            except (CliError, ValueError) as e:
                notes.append(f"metrics of {endpoint.where} (node {endpoint.node}): {e}")
    return samples, notes
