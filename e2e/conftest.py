"""e2e fixtures: one local cluster per session (e2e/cluster), built by `make cluster`.

The minor comes from CARVE_E2E_K8S (default: e2e/cluster/versions.py's DEFAULT_MINOR, 1.37), the DRA gates
from CARVE_E2E_GATES (on|off), the nodes' container runtime from CARVE_E2E_RUNTIME (containerd, the default,
or fakecri).
A cluster binary that is not built, or a cluster that does not come up, fails the session: a broken e2e
must never pass as skipped. On a minor without DRA (1.29) only the tests marked `legacy` (the legacy shim,
e2e/test_legacy.py) run; every other test is skipped, naming the minor (`make e2e-legacy` selects them).
The kind suite (e2e/kind, against $KUBECONFIG) runs with `make e2e-kind`.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest

collect_ignore = [] if os.environ.get("CARVE_E2E_TARGET") == "kind" else ["kind"]


def pytest_collection_modifyitems(config, items):
    from e2e.cluster.versions import DEFAULT_MINOR, resolve

    version = resolve(os.environ.get("CARVE_E2E_K8S", DEFAULT_MINOR), os.environ.get("CARVE_E2E_GATES", "on"))
    if version.dra:
        return
    skip = pytest.mark.skip(
        reason=f"Kubernetes {version.patch} has no DRA (resource.k8s.io/v1 is 1.34+): "
        "only the legacy shim's tests (marker `legacy`) run on it"
    )
    for item in items:
        if "legacy" not in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster():
    from e2e.cluster.launcher import Cluster
    from e2e.cluster.versions import DEFAULT_MINOR, resolve
    from e2e.sessions import cluster_session

    version = resolve(os.environ.get("CARVE_E2E_K8S", DEFAULT_MINOR), os.environ.get("CARVE_E2E_GATES", "on"))
    root = Path(tempfile.mkdtemp(prefix=f"carve-e2e-{version.minor}-"))
    c = Cluster(version, root, runtime=os.environ.get("CARVE_E2E_RUNTIME", "containerd"))
    yield from cluster_session(c, root, f"{version.label} cluster")


@pytest.fixture(scope="session")
def api(cluster):
    return cluster.api()


@pytest.fixture(scope="session")
def gates_on(cluster) -> bool:
    return cluster.version.gates_on


@pytest.fixture
def namespace(api, cluster):
    from kubernetes import client

    core = client.CoreV1Api(api)
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    # Wait for the pods to go so the next test sees their devices free again.
    from e2e import kube

    kube.delete_namespace(api, name, claims=cluster.version.dra)


@pytest.fixture(scope="module")
def webhooks(cluster):
    """The controller's admission webhooks (e2e/controller_webhooks.py), one per test module that asks."""
    from e2e.controller_webhooks import ControllerWebhooks

    w = ControllerWebhooks(cluster).start()
    yield w
    w.stop()
