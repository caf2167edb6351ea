"""The status writer replaces carve's own entries of a claim as the API server returns it (decoded from
JSON, so its strings are not the ones carve's code holds) and keeps other drivers' entries: a re-prepare
leaves one entry per device, not the old one beside the new (docs/plugin.md "Claim status")."""

from __future__ import annotations

import json

from driver import names
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.status import ClaimStatusWriter

OTHER = {"driver": "net.example.com", "pool": "node-a", "device": "nic-0"}
OLD = {"driver": names.DRIVER_NAME, "pool": "node-a", "device": "gpu-0", "data": {"strategy": "soft"}}
NEW = {"driver": names.DRIVER_NAME, "pool": "node-a", "device": "gpu-1", "data": {"strategy": "soft"}}


class ApiServer:
    """Answers reads with the claim as JSON on the wire decodes it, and records the status written."""

    def __init__(self):
        self.claim = {
            "metadata": {"namespace": "ns", "name": "c", "uid": "uid-1", "resourceVersion": "3"},
            "status": {"devices": [OTHER, OLD]},
        }
        self.written: list[dict] = []

    def get_resource_claim(self, namespace, name):
        return json.loads(json.dumps(self.claim))

    def update_resource_claim_status(self, body):
        self.written.append(json.loads(json.dumps(body)))
        return body


def test_a_write_replaces_carves_entries_of_a_claim_read_from_the_api_server():
    server = ApiServer()
    assert ClaimStatusWriter(server, sleep=lambda _s: None).write(ClaimRef("ns", "c", "uid-1"), [NEW])
    (body,) = server.written
    assert body["status"]["devices"] == [OTHER, NEW]


def test_a_clear_removes_only_carves_entries():
    server = ApiServer()
    assert ClaimStatusWriter(server, sleep=lambda _s: None).clear(ClaimRef("ns", "c", "uid-1"))
    (body,) = server.written
    assert body["status"]["devices"] == [OTHER]
