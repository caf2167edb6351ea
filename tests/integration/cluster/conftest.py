"""Fixtures for Cluster tests: a KubeCluster on the API server stand-in, and clusters of both kinds.

The `apiserver` fixture itself is in tests/conftest.py (any test can use it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.apiserver_standin import ApiServerStandIn

from driver.cluster import LocalCluster
from driver.cluster.kube import KubeCluster


@pytest.fixture
def kube_cluster(apiserver: ApiServerStandIn, tmp_path: Path) -> KubeCluster:
    return KubeCluster.from_config(apiserver.kubeconfig(tmp_path / "kubeconfig"))


ClusterFactory = Callable[..., tuple[object, Callable[[dict], dict]]]


@pytest.fixture(params=["local", "kube"])
def make_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ClusterFactory]:
    """Factory: make_cluster(drop_fields=...) -> (cluster, put_claim) for LocalCluster or KubeCluster.

    Parametrized, so every test using it runs against both and they must behave the same.
    """
    servers: list[ApiServerStandIn] = []

    def make(drop_fields: frozenset[str] = frozenset(), version: tuple[int, int] = (1, 34)):
        if request.param == "local":
            local = LocalCluster(drop_fields=drop_fields, version=version)
            return local, local.put_resource_claim
        server = ApiServerStandIn(drop_fields=drop_fields, version=(str(version[0]), str(version[1]))).start()
        servers.append(server)
        kubeconfig = server.kubeconfig(tmp_path / f"kubeconfig-{len(servers)}")
        return KubeCluster.from_config(kubeconfig), server.put_claim

    yield make
    for server in servers:
        server.stop()
