"""e2e fixtures: a real cluster from $KUBECONFIG with carve installed.

Without KUBECONFIG every test is skipped. With one, an unreachable cluster or a carve that published no
ResourceSlices fails: a broken install (a crash-looping plugin publishes nothing) must not pass as skipped.
"""

from __future__ import annotations

import os
import uuid

import pytest

from driver import names


@pytest.fixture(scope="session")
def api():
    path = os.environ.get("KUBECONFIG", "")
    if not path or not os.path.exists(path):
        pytest.skip(
            "e2e needs a cluster: set KUBECONFIG to a cluster with carve installed (see e2e/README.md)"
        )
    from kubernetes import client, config

    config.load_kube_config(config_file=path)
    api_client = client.ApiClient()
    try:
        client.VersionApi(api_client).get_code(_request_timeout=10)
    except Exception as e:  # unreachable cluster: one clear line instead of a client traceback per test
        pytest.fail(f"e2e: the cluster in KUBECONFIG={path} does not answer: {type(e).__name__}: {e}")
    return api_client


@pytest.fixture(scope="session")
def carve_nodes(api) -> list[str]:
    """Nodes whose carve plugin published slices; fail when there are none (not installed, or broken)."""
    from kubernetes import client

    objs = client.CustomObjectsApi(api).list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
    nodes = sorted(
        {s["spec"].get("nodeName") for s in objs["items"] if s["spec"]["driver"] == names.DRIVER_NAME}
    )
    if not nodes:
        pytest.fail(
            f"e2e: no ResourceSlices of {names.DRIVER_NAME}: carve is not installed or its plugin publishes "
            "nothing (e2e/README.md)"
        )
    return nodes


@pytest.fixture
def namespace(api):
    from kubernetes import client

    core = client.CoreV1Api(api)
    name = f"carve-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
