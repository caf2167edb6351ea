"""API JSON decoded one object at a time with a nesting limit: one deep or broken claim is left out (and
named), never an error for the whole list, the watch or the reflector that lists it."""

from __future__ import annotations

import json
import threading
import time

import pytest

from driver.cluster.decode import MAX_DEPTH, DecodeError, decode_list, decode_object, too_deep
from driver.cluster.informer import Informer
from driver.cluster.kube_objects import KubeObjects

DEEP = "[" * 5000 + "]" * 5000  # past Python's recursion limit: json.loads of the whole list raises


def claim(i: int, parameters: str = '{"a": 1}') -> str:
    meta = {"name": f"c{i}", "namespace": "ns", "uid": f"u{i}", "resourceVersion": "7"}
    body = json.dumps({"metadata": meta,
                       "spec": {"devices": {"requests": [], "config": [
                           {"opaque": {"driver": "gpu.carve.dev", "parameters": {"p": 0}}}]}}})
    return body.replace('{"p": 0}', parameters)


def listing(*items: str, rv: str = "42") -> bytes:
    top = json.dumps({"kind": "ResourceClaimList", "metadata": {"resourceVersion": rv}, "items": []})
    return top.replace('"items": []', '"items": [' + ",".join(items) + "]").encode()


def test_the_whole_list_would_not_decode_with_json_loads():
    with pytest.raises(RecursionError):
        json.loads(listing(claim(1), claim(2, DEEP)))


def test_a_claim_nested_thousands_deep_is_left_out_and_named():
    top, good, bad = decode_list(listing(claim(1), claim(2, DEEP), claim(3)))
    assert [g["metadata"]["name"] for g in good] == ["c1", "c3"]
    assert top["metadata"]["resourceVersion"] == "42"
    (b,) = bad
    assert (b.namespace, b.name, b.uid) == ("ns", "c2", "u2")
    assert "nested deeper than" in b.reason


def test_a_claim_deeper_than_the_limit_but_decodable_is_left_out_naming_the_field():
    too = "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5)
    _, good, bad = decode_list(listing(claim(1, too), claim(2)))
    assert [g["metadata"]["name"] for g in good] == ["c2"]
    assert bad[0].name == "c1"
    assert bad[0].reason.startswith("spec.devices.config[0].opaque.parameters[0]")


def test_strings_with_brackets_and_escapes_do_not_confuse_the_split():
    tricky = json.dumps({"s": 'a "quoted" ] } [ { \\ string'})
    _, good, bad = decode_list(listing(claim(1, tricky), claim(2, DEEP), claim(3, '"]}"')))
    assert [g["metadata"]["name"] for g in good] == ["c1", "c3"]
    assert good[0]["spec"]["devices"]["config"][0]["opaque"]["parameters"] == json.loads(tricky)
    assert [b.name for b in bad] == ["c2"]


def test_broken_json_as_a_whole_is_an_error_not_a_crash():
    with pytest.raises(DecodeError, match="unbalanced"):
        decode_list(b'{"items": [{"metadata": {}}')


def test_one_object_too_deep_is_a_decode_error_naming_it():
    with pytest.raises(DecodeError, match="watch event: nested deeper"):
        decode_object('{"object": ' + DEEP + "}", "watch event")
    assert too_deep({"a": [{"b": 1}]}, limit=3) is None
    assert too_deep({"a": [{"b": [1]}]}, limit=3) == ".a[0].b"


class _Resp:
    def __init__(self, data: bytes, lines: list[bytes] | None = None) -> None:
        self.data, self.status, self._lines = data, 200, lines or []

    def stream(self, amt=None, decode_content=False):
        yield from self._lines

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class FakeApi(KubeObjects):
    """KubeObjects with the HTTP call replaced by fixed responses: the real decoding runs."""

    def __init__(self, listed: bytes, watched: list[bytes]) -> None:
        self.listed, self.watched, self.request_timeout = listed, watched, 1.0
        self.list_calls = 0

    def _call(self, kind, name, namespace, fn):
        return fn()

    def _lister(self, plural):
        def lister(watch=False, **kw):
            if watch:
                lines, self.watched = self.watched, []
                if not lines:
                    time.sleep(0.05)
                return _Resp(b"", lines)
            self.list_calls += 1
            return _Resp(self.listed)
        return lister


def test_list_objects_leaves_the_bad_claim_out_and_remembers_it():
    api = FakeApi(listing(claim(1), claim(2, DEEP)), [])
    items, rv = api.list_objects("resourceclaims")
    assert [i["metadata"]["name"] for i in items] == ["c1"] and rv == "42"
    assert items[0]["kind"] == "ResourceClaim"
    (bad,) = api.undecodable.values()
    assert (bad.kind, bad.namespace, bad.name) == ("ResourceClaim", "ns", "c2")


def test_a_watch_skips_an_undecodable_event_and_goes_on():
    lines = [b'{"type": "MODIFIED", "object": %s}\n' % claim(2, DEEP).encode(),
             b'{"type": "ADDED", "object": %s}\n' % claim(3).encode()]
    api = FakeApi(listing(), lines)
    got = list(api.watch_objects("resourceclaims", "42", 1))
    assert [(k, o["metadata"]["name"]) for k, o in got] == [("ADDED", "c3")]


def test_the_reflector_syncs_once_and_does_not_relist_for_a_bad_claim():
    added = b'{"type": "ADDED", "object": %s}\n' % claim(3).encode()
    api = FakeApi(listing(claim(1), claim(2, DEEP)), [added])
    stop = threading.Event()
    informer = Informer(api, "resourceclaims", lambda plural: None, resync_s=600, backoff_s=0.01).start(stop)
    try:
        assert informer.synced.wait(10)
        deadline = time.monotonic() + 10
        while informer.get("ns/c3") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # time enough for a relist loop to show itself
        assert sorted(o["metadata"]["name"] for o in informer.items()) == ["c1", "c3"]
        assert api.list_calls == 1 and informer.lists == 1
    finally:
        stop.set()
