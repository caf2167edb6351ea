"""The plugin's claim fetch through the real kubernetes client: a claim nested thousands deep (or past
carve's limit) is a ClusterError naming the claim, not a RecursionError out of the client."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from api.v1alpha1.resolve import ConfigError, resolve_configs
from driver import names
from driver.cluster.base import ClusterError
from driver.cluster.kube import ApiClient, KubeCluster


def claim_json(parameters: str) -> bytes:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"devices": {"requests": [], "config": [
                {"opaque": {"driver": "gpu.carve.dev", "parameters": {"p": 0}}}]}}}
    return json.dumps(body).replace('{"p": 0}', parameters).encode()


@pytest.fixture
def serve():
    servers = []

    def start(body: bytes) -> KubeCluster:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        cfg = client.Configuration(host=f"http://127.0.0.1:{server.server_port}")
        return KubeCluster(ApiClient(cfg), request_timeout=5)

    yield start
    for s in servers:
        s.shutdown()


def test_a_claim_nested_thousands_deep_is_a_cluster_error_naming_it(serve):
    api = serve(claim_json("[" * 5000 + "]" * 5000))
    with pytest.raises(ClusterError, match="ResourceClaim ns/c: nested deeper than"):
        api.get_resource_claim("ns", "c")


def test_a_claim_past_carves_limit_names_the_field(serve):
    api = serve(claim_json('{"a": ' * 150 + "1" + "}" * 150))
    field = r"ResourceClaim ns/c: spec\.devices\.config\[0\]\.opaque\.parameters"
    with pytest.raises(ClusterError, match=field):
        api.get_resource_claim("ns", "c")


def test_a_claim_the_clients_model_would_refuse_is_refused_by_carves_config_parser_naming_the_field(serve):
    # The claim is read as the server's JSON (no client model: docs/performance.md); parameters that are
    # not an object are refused where carve reads them, naming the entry and the field.
    api = serve(claim_json("[1, 2]"))
    got = api.get_resource_claim("ns", "c")
    configs = got["spec"]["devices"]["config"]
    with pytest.raises(ConfigError, match=r"claim config\[0\].*opaque\.parameters"):
        resolve_configs(None, configs, "r", names.TYPE_VGPU)


def test_an_ordinary_claim_is_read(serve):
    api = serve(claim_json('{"cores": 30}'))
    got = api.get_resource_claim("ns", "c")
    assert got["spec"]["devices"]["config"][0]["opaque"]["parameters"] == {"cores": 30}
