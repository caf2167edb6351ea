"""KubeCluster on the wire: what the real `kubernetes` client sends, and how server errors come back."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from support.apiserver_standin import ApiServerStandIn
from test_cluster_contract import claim_obj, slice_obj

from driver.cluster import ClusterError, Conflict, NotFound
from driver.cluster.kube import KubeCluster, load_api_client, parse_version, rfc3339
from driver.names import DRIVER_NAME

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def test_list_sends_field_selector_for_driver_and_node(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    kube_cluster.list_resource_slices(DRIVER_NAME, "node-a")
    sent = apiserver.requests[-1]
    assert (sent.method, sent.path) == ("GET", SLICES)
    assert sent.query["fieldSelector"] == [f"spec.driver={DRIVER_NAME},spec.nodeName=node-a"]


def test_claim_is_read_from_its_namespaced_path(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    apiserver.put_claim(claim_obj("c1", "team-a"))
    kube_cluster.get_resource_claim("team-a", "c1")
    assert apiserver.requests[-1].path == "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/c1"


def test_writes_send_camel_case_json_and_the_field_manager(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    created = kube_cluster.create_resource_slice(slice_obj("s"))
    post = apiserver.requests[-1]
    assert (post.method, post.path, post.query.get("fieldManager")) == ("POST", SLICES, ["carve"])
    assert post.body["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    assert post.body["spec"]["nodeName"] == "node-a"
    kube_cluster.update_resource_slice(created)
    put = apiserver.requests[-1]
    assert (put.method, put.path) == ("PUT", f"{SLICES}/s")
    assert put.body["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_fields_unknown_to_the_client_never_reach_the_server(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    obj = slice_obj("s", futureField={"x": 1})
    stored = kube_cluster.create_resource_slice(obj)
    assert "futureField" not in apiserver.requests[-1].body["spec"]["devices"][0]
    assert "futureField" not in stored["spec"]["devices"][0]


def test_object_the_client_model_cannot_hold_fails_before_sending(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    obj = slice_obj("broken")
    obj["spec"]["pool"]["generation"] = "one"
    with pytest.raises(ClusterError) as caught:
        kube_cluster.create_resource_slice(obj)
    assert caught.value.name == "broken" and "V1ResourceSlice" in str(caught.value)
    assert not any(r.method == "POST" for r in apiserver.requests)


def test_bearer_token_from_kubeconfig_is_sent(apiserver: ApiServerStandIn, tmp_path: Path) -> None:
    apiserver.token = "another-token"
    cluster = KubeCluster.from_config(apiserver.kubeconfig(tmp_path / "good"))
    assert cluster.list_resource_slices(DRIVER_NAME) == []
    apiserver.token = "rotated"
    with pytest.raises(ClusterError) as caught:
        cluster.list_resource_slices(DRIVER_NAME)
    assert caught.value.status == 401
    assert not isinstance(caught.value, (NotFound, Conflict))


def test_server_error_is_a_cluster_error_naming_the_object(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    kube_cluster.create_resource_slice(slice_obj("s"))
    apiserver.fail_next("DELETE", f"{SLICES}/s", 500, "InternalError")
    with pytest.raises(ClusterError) as caught:
        kube_cluster.delete_resource_slice("s")
    assert (caught.value.status, caught.value.kind, caught.value.name) == (500, "ResourceSlice", "s")
    assert "ResourceSlice s: 500 InternalError" in str(caught.value)
    kube_cluster.delete_resource_slice("s")  # the injected failure was one-shot


def test_conflict_message_carries_the_server_explanation(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    created = kube_cluster.create_resource_slice(slice_obj("s"))
    kube_cluster.update_resource_slice(created)
    with pytest.raises(Conflict, match="the object has been modified"):
        kube_cluster.update_resource_slice(created)


def test_server_validation_rejection_is_a_cluster_error(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
) -> None:
    apiserver.fail_next("POST", SLICES, 422, "Invalid")
    with pytest.raises(ClusterError) as caught:
        kube_cluster.create_resource_slice(slice_obj("s"))
    assert caught.value.status == 422


def test_unreachable_server_is_a_cluster_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on that port once the socket is closed.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: x, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: x, user: u}}]\n"
    )
    cluster = KubeCluster.from_config(kubeconfig, request_timeout=2)
    with pytest.raises(ClusterError) as caught:
        cluster.get_resource_claim("ns", "c")
    assert caught.value.status is None
    assert "unreachable" in str(caught.value) and "ns/c" in str(caught.value)


def test_missing_kubeconfig_is_a_cluster_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"nowhere\.yaml"):
        load_api_client(tmp_path / "nowhere.yaml")


def test_timestamps_are_rfc3339_with_z(kube_cluster: KubeCluster) -> None:
    created = kube_cluster.create_resource_slice(slice_obj("s"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created["metadata"]["creationTimestamp"])


@pytest.mark.parametrize(
    ("major", "minor", "expected"),
    [("1", "34", (1, 34)), ("1", "35+", (1, 35)), ("1", "36-gke.1200", (1, 36))],
)
def test_parse_version_tolerates_provider_suffixes(major: str, minor: str, expected: tuple[int, int]) -> None:
    assert parse_version(major, minor) == expected


def test_parse_version_rejects_garbage() -> None:
    with pytest.raises(ClusterError, match="unparsable"):
        parse_version("1", "")


def test_server_version_with_plus_suffix(tmp_path: Path) -> None:
    with ApiServerStandIn(version=("1", "34+")) as server:
        assert KubeCluster.from_config(server.kubeconfig(tmp_path / "kc")).server_version() == (1, 34)


def test_rfc3339_keeps_fractions_only_when_present() -> None:
    import datetime

    utc = datetime.UTC
    assert rfc3339(datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=utc)) == "2025-01-02T03:04:05Z"
    assert (
        rfc3339(datetime.datetime(2025, 1, 2, 3, 4, 5, 120000, tzinfo=utc)) == "2025-01-02T03:04:05.120000Z"
    )
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    assert rfc3339(datetime.datetime(2025, 1, 2, 5, 4, 5, tzinfo=plus_two)) == "2025-01-02T03:04:05Z"
