"""A claim nested too deep inside a JSON list (the list is then decoded item by item) keeps its name and,
when it has one, its namespace, for the line that reports it; one without a namespace gets none, not an
empty one. The requests' candidate lists are kept across claims with the CEL result cache and made again
for each claim without it (what the throughput benchmark's baseline measures)."""

from __future__ import annotations

import json

import pytest
from allocator_fixtures import CLASSES, DRIVER, claim, dev, exactly, slice_

from driver.allocator import command
from driver.allocator.allocator import Allocator


def _deep(name, namespace):
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    c = {"kind": "ResourceClaim", "metadata": meta,
         "spec": {"devices": {"config": [{"opaque": {"driver": "x", "parameters": {"p": 0}}}]}}}
    return json.dumps(c).replace('{"p": 0}', "[" * 5000 + "]" * 5000)


@pytest.mark.parametrize(("namespace", "metadata"), [("team-a", {"name": "deep", "namespace": "team-a"}),
                                                     (None, {"name": "deep"})], ids=["namespaced", "bare"])
def test_a_claim_too_deep_in_a_list_keeps_its_name_and_namespace(tmp_path, namespace, metadata):
    ok = json.dumps({"kind": "ResourceClaim", "metadata": {"name": "ok"}})
    path = tmp_path / "k.json"
    path.write_text('{"kind": "List", "items": [' + ok + "," + _deep("deep", namespace) + "]}")
    (_, first), (where, stand_in) = command.Loader().load("--claims", [str(path)], ("ResourceClaim",))
    assert first["metadata"] == {"name": "ok"}
    assert where == f"{path} document 1 (ResourceClaim deep)"
    assert stand_in["metadata"] == metadata and command.UNDECODABLE in stand_in


SELECTOR = f'device.attributes["{DRIVER}"].uuid != "x"'


def test_candidates_are_kept_across_claims_with_the_cache_and_made_per_claim_without():
    cached = Allocator([slice_("s", [dev("g0"), dev("g1"), dev("g2")])], CLASSES)
    uncached = Allocator([slice_("s", [dev("g0"), dev("g1"), dev("g2")])], CLASSES, cel_cache=False)
    for k in range(1, 4):
        for a in (cached, uncached):
            a.allocate(claim(f"c{k}", exactly("r", selectors=[SELECTOR])))
        assert cached.stats["cel_cache_hits"] + cached.stats["cel_cache_misses"] == 6  # looked up once
        assert uncached.stats["cel_evaluations"] == 6 * k  # three class, three request selectors a claim
