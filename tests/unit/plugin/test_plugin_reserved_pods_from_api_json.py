"""The pods a claim is reserved for (the only pods whose processes `--kill-unenforced` may kill, and the
pods the preparer records) are read from the ResourceClaim the API server returns, JSON parsed at run time:
each entry's `resource` is a string of its own, not the literal "pods" the code compares it with, so it is
compared by value and a core pod is found; an entry of another resource, core or not, is not a pod."""

from __future__ import annotations

import json

from driver.plugin.enforcement.attribution import reserved_pods

POD_A = "0b4a7c1e-58a3-4f7e-9d2c-6a1b2c3d4e5f"
POD_B = "1c5b8d2f-69b4-4a8f-8e3d-7b2c3d4e5f60"
OTHER = "2d6c9e3a-7ac5-4b9a-9f4e-8c3d4e5f6071"  # core objects, not pods (after, before), an apps one

CLAIM = f"""
{{"metadata": {{"name": "c", "namespace": "ml"}},
  "status": {{"reservedFor": [
    {{"resource": "pods", "name": "p", "uid": "{POD_A}"}},
    {{"apiGroup": "", "resource": "pods", "name": "q", "uid": "{POD_B}"}},
    {{"apiGroup": "apps", "resource": "statefulsets", "name": "s", "uid": "{OTHER}"}},
    {{"resource": "services", "name": "v", "uid": "{OTHER}"}},
    {{"resource": "nodes", "name": "n", "uid": "{OTHER}"}}
  ]}}}}
"""


def test_the_pods_of_a_claim_read_from_json_are_found() -> None:
    assert reserved_pods(json.loads(CLAIM)) == (POD_A, POD_B)
