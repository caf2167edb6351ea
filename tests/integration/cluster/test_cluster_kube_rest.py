"""The two calls every prepare makes, through the client's REST layer (KubeCluster._rest), and the paced
refresh hook (PacedRefresh): what goes on the wire, how errors come back, when the hook runs."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pytest
from kubernetes.client import configuration as client_configuration
from kubernetes.config import incluster_config
from support.apiserver_standin import ApiServerStandIn
from test_cluster_contract import claim_obj

from driver.cluster import ClusterError, Conflict, NotFound
from driver.cluster.kube import REFRESH_PERIOD_S, KubeCluster, PacedRefresh, claim_path, load_api_client
from e2e.cluster.certs import CA

CLAIM = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/c1"


def test_claim_read_and_status_write_carry_the_token_and_json(
    apiserver: ApiServerStandIn, tmp_path: Path
) -> None:
    apiserver.put_claim(claim_obj("c1", "team-a"))
    cluster = KubeCluster(load_api_client(apiserver.kubeconfig(tmp_path / "kc", token="plugin-token")))
    claim = cluster.get_resource_claim("team-a", "c1")
    read = apiserver.requests[-1]
    assert (read.method, read.path, read.token) == ("GET", CLAIM, "plugin-token")
    claim["status"] = {
        "devices": [{"driver": "gpu.carve.dev", "pool": "node-a", "device": "gpu-0", "data": {"a": 1}}]
    }
    stored = cluster.update_resource_claim_status(claim)
    write = apiserver.requests[-1]
    assert (write.method, write.path, write.token) == ("PUT", CLAIM + "/status", "plugin-token")
    assert write.ctype.startswith("application/json")
    # The body is the dict as given: a field the client's model lacks (devices[].data) reaches the server.
    assert write.body["status"]["devices"][0]["data"] == {"a": 1}
    assert stored["status"]["devices"][0]["data"] == {"a": 1}
    assert stored["metadata"]["resourceVersion"] != claim["metadata"]["resourceVersion"]


def test_rest_errors_map_as_the_generated_methods_did(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    with pytest.raises(NotFound):
        kube_cluster.get_resource_claim("team-a", "absent")
    apiserver.put_claim(claim_obj("c1", "team-a"))
    stale = kube_cluster.get_resource_claim("team-a", "c1")
    kube_cluster.update_resource_claim_status(dict(stale, status={"devices": []}))
    with pytest.raises(Conflict):
        kube_cluster.update_resource_claim_status(dict(stale, status={"devices": []}))


def test_a_wrong_token_is_a_cluster_error_not_a_not_found(
    apiserver: ApiServerStandIn, tmp_path: Path
) -> None:
    apiserver.put_claim(claim_obj("c1", "team-a"))
    kubeconfig = apiserver.kubeconfig(tmp_path / "kc", token="good")
    apiserver.tokens.discard("good")  # the server no longer accepts it
    with pytest.raises(ClusterError) as caught:
        KubeCluster(load_api_client(kubeconfig)).get_resource_claim("team-a", "c1")
    assert not isinstance(caught.value, NotFound)
    assert "team-a/c1" in str(caught.value)


def test_claim_path_quotes_every_character_a_path_would_read() -> None:
    # Names come from the kubelet, which took them from the API server, but a path is built from them:
    # nothing in them may add a segment or a query.
    assert claim_path("a/b", "c?d") == "/apis/resource.k8s.io/v1/namespaces/a%2Fb/resourceclaims/c%3Fd"


def test_the_loaders_hook_runs_once_per_period_not_per_request(
    apiserver: ApiServerStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubeconfig loader's hook re-applies the configuration at every request; setting the host scans the
    environment for proxies. Paced, 50 reads scan it at most twice (once at load, once at the first read)."""
    scans = []
    real = client_configuration.getproxies
    monkeypatch.setattr(client_configuration, "getproxies", lambda: scans.append(1) or real())
    apiserver.put_claim(claim_obj("c1", "team-a"))
    api = load_api_client(apiserver.kubeconfig(tmp_path / "kc", token="t"))
    assert isinstance(api.configuration.refresh_api_key_hook, PacedRefresh)
    cluster = KubeCluster(api)
    before = len(scans)
    for _ in range(50):
        cluster.get_resource_claim("team-a", "c1")
    assert len(scans) - before <= 1
    # The hook re-installed the loader's own closure; ours is still the one the client calls.
    assert isinstance(api.configuration.refresh_api_key_hook, PacedRefresh)


class _Config:
    refresh_api_key_hook = None


def test_paced_refresh_runs_the_hook_again_after_the_period() -> None:
    now = [100.0]
    calls = []
    paced = PacedRefresh(lambda cfg: calls.append(now[0]), period=1.0, clock=lambda: now[0])
    cfg = _Config()
    cfg.refresh_api_key_hook = paced
    paced(cfg)
    now[0] = 100.9
    paced(cfg)
    assert calls == [100.0]
    now[0] = 101.0
    paced(cfg)
    assert calls == [100.0, 101.0]


def test_the_default_period_renews_a_token_at_most_a_second_late() -> None:
    # docs/performance.md promises a token renewed at most a second after it expired.
    now = [0.0]
    calls = []
    paced = PacedRefresh(lambda cfg: calls.append(now[0]), clock=lambda: now[0])
    for t in (0.0, 0.5, 0.99, 1.0):
        now[0] = t
        paced(_Config())
    assert calls == [0.0, 1.0]


def test_paced_refresh_adopts_the_hook_a_loader_reinstalls() -> None:
    cfg = _Config()
    second = []

    def first(c) -> None:
        c.refresh_api_key_hook = lambda c2: second.append(1)  # as _set_config does

    now = [0.0]
    paced = PacedRefresh(first, period=1.0, clock=lambda: now[0])
    cfg.refresh_api_key_hook = paced
    paced(cfg)
    assert cfg.refresh_api_key_hook is paced
    now[0] = 5.0
    paced(cfg)
    assert second == [1]


def test_a_hook_that_raises_runs_again_at_the_next_request() -> None:
    tries = []

    def flaky(cfg) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise OSError("token file not there yet")

    paced = PacedRefresh(flaky, period=60.0, clock=lambda: 0.0)
    with pytest.raises(OSError):
        paced(_Config())
    paced(_Config())
    assert len(tries) == 2


class _LoaderClock:
    """`datetime` as the in-cluster loader imports it, its `now()` moved forward at will: the loader
    re-reads its token file once its one-minute period has passed, which a test cannot wait for."""

    timedelta = datetime.timedelta

    def __init__(self) -> None:
        clock = self

        class Moved(datetime.datetime):
            @classmethod
            def now(cls, tz=None):
                return datetime.datetime.now(tz) + clock.ahead

        self.datetime = Moved
        self.ahead = datetime.timedelta(0)


def test_an_in_cluster_token_rotated_on_disk_is_sent_once_the_loader_renews_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin in a pod: the in-cluster loader over HTTPS with the service account's token file, which
    the kubelet rotates (a projected token is renewed well before it expires). Through the REST path and the
    paced hook, the new token is sent within the loader's minute plus PacedRefresh's second, reads and
    status writes alike, and nothing fails meanwhile."""
    ca = CA(tmp_path)
    serving = ca.issue("apiserver", "kube-apiserver", server=True)
    token = tmp_path / "token"
    token.write_text("token-1")
    clock = _LoaderClock()
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca.path))
    monkeypatch.setattr(incluster_config, "datetime", clock)
    server = ApiServerStandIn(token="token-1").start(tls=(serving.cert, serving.key))
    try:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", server.url.rpartition(":")[2])
        server.put_claim(claim_obj("c1", "team-a"))
        cluster = KubeCluster.from_config()  # no kubeconfig: in-cluster first, as in the chart's pods
        assert cluster.api_client.configuration.host.startswith("https://127.0.0.1:")
        cluster.get_resource_claim("team-a", "c1")
        assert server.requests[-1].token == "token-1"

        token.write_text("token-2")  # the kubelet's rotation: both valid until the old one expires
        server.tokens.add("token-2")
        cluster.get_resource_claim("team-a", "c1")
        assert server.requests[-1].token == "token-1"  # the loader's minute has not passed

        clock.ahead = datetime.timedelta(seconds=61)
        sent = set()
        deadline = time.monotonic() + REFRESH_PERIOD_S + 5
        while "token-2" not in sent and time.monotonic() < deadline:
            claim = cluster.get_resource_claim("team-a", "c1")
            sent.add(server.requests[-1].token)
            time.sleep(0.05)
        assert "token-2" in sent
        server.token, server.tokens = "token-2", set()  # the old token expired: only the new one works
        claim = cluster.get_resource_claim("team-a", "c1")
        claim["status"] = {"devices": [{"driver": "gpu.carve.dev", "pool": "node-a", "device": "gpu-0"}]}
        cluster.update_resource_claim_status(claim)
        assert [r.token for r in server.requests[-2:]] == ["token-2", "token-2"]
    finally:
        server.stop()
