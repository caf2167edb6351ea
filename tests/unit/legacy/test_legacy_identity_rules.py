"""The legacy identity rules a hostile pod could exploit: devices seen in two pods are never resolved to one
of them, and an assignment record is only believed under the name of the pod uid it records."""

from __future__ import annotations

import pytest

from driver.cluster.base import NotFound
from driver.legacy.identity import Holder, IdentityError, resolve
from driver.legacy.records import Assignment, ContainerAssignment, DeviceShare, RecordError, parse_record
from driver.legacy.records import record_object as make_record

NS = "carve-system"
NODE = "n1"
IDS = ["GPU-a::0", "GPU-a::1"]


def assignment(pod: str, uid: str) -> Assignment:
    share = DeviceShare(uuid="GPU-a", memoryMiB=1024, cores=30)
    return Assignment(namespace="team", name=pod, uid=uid, node=NODE,
                      containers=(ContainerAssignment(name="main", devices=(share, share)),))


class FakePodResources:
    """The kubelet's view: PodResources' holders, and the pod UIDs its device checkpoint names."""

    def __init__(self, holders: list[Holder]) -> None:
        self._holders = holders

    def holders(self, resource: str, ids) -> list[Holder]:
        return list(self._holders)

    def pod_uids(self, resource: str, ids) -> set[str]:
        return {f"uid-{h.pod}" for h in self._holders}


class FakeApi:
    """Two pods on this node, each with its own, valid assignment record."""

    def __init__(self) -> None:
        self.pods = {("team", p): {"metadata": {"name": p, "namespace": "team", "uid": f"uid-{p}"},
                                   "spec": {"nodeName": NODE}} for p in ("victim", "attacker")}
        self.records = {f"carve-legacy-uid-{p}": make_record(assignment(p, f"uid-{p}"), NS)
                        for p in ("victim", "attacker")}

    def get_pod(self, ns: str, name: str) -> dict:
        return self.pods[(ns, name)]

    def list_configmaps(self, ns: str, selector: str) -> list[dict]:
        return list(self.records.values())

    def get_configmap(self, ns: str, name: str) -> dict:
        if name not in self.records:
            raise NotFound(name)
        return self.records[name]


def test_devices_listed_for_two_pods_are_refused_not_guessed():
    # Both pods' records are valid, so resolving to either one would "work": the rule must refuse.
    holders = [Holder("team", "victim", "main"), Holder("team", "attacker", "main")]
    with pytest.raises(IdentityError, match="held by several pods"):
        resolve(IDS, "nvidia.com/gpu", NODE, FakePodResources(holders), FakeApi(), NS)


def test_devices_of_one_pod_resolve_to_its_own_record():
    found = resolve(IDS, "nvidia.com/gpu", NODE, FakePodResources([Holder("team", "victim", "main")]),
                    FakeApi(), NS)
    assert (found.pod, found.pod_uid, found.container.name) == ("victim", "uid-victim", "main")


def test_a_record_stored_under_another_pods_name_is_rejected():
    # A record that says "uid-attacker" but sits at the victim's record name must not be believed.
    obj = make_record(assignment("attacker", "uid-attacker"), NS)
    obj["metadata"]["name"] = "carve-legacy-uid-victim"
    with pytest.raises(RecordError, match=r"metadata\.name: does not match the pod uid uid-attacker"):
        parse_record(obj)


def test_a_record_under_its_own_name_parses():
    a = assignment("victim", "uid-victim")
    assert parse_record(make_record(a, NS)) == a


def test_a_record_for_another_node_is_refused():
    api = FakeApi()
    other = Assignment(namespace="team", name="victim", uid="uid-victim", node="n2",
                       containers=assignment("victim", "uid-victim").containers)
    api.records["carve-legacy-uid-victim"] = make_record(other, NS)
    with pytest.raises(IdentityError, match=r"assignment record names team/victim \(uid-victim\) on n2"):
        resolve(IDS, "nvidia.com/gpu", NODE, FakePodResources([Holder("team", "victim", "main")]), api, NS)
