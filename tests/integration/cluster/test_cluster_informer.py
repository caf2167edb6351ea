"""The shared list+watch loop (driver/cluster/informer.py) against the API stand-in, through the real
kubernetes client and both of its callers: the legacy extender's `Reflector` over `KubeLegacyApi` with a
`Source`, and the controller's and plugin's `Informer` over `KubeCluster`. Each follows the nodes: a 410
Gone lists again and keeps following, failures are retried with a bounded backoff (a failed watch resumes
from the known version, no list), and an event the consumer cannot take lists again instead of ending the
thread. (The extender's state on top of it: tests/integration/legacy/test_legacy_informer.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.apiserver_standin import ApiServerStandIn

from driver.cluster.informer import Informer, Reflector
from driver.cluster.kube import KubeCluster, load_api_client
from driver.legacy.kubeapi import KubeLegacyApi, Source


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def seed(s: ApiServerStandIn, node: str) -> None:
    s.put(f"/api/v1/nodes/{node}", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})


class Follower:
    """The nodes as one caller sees them. `hook(name)` runs on every event, before the caller takes it."""

    def __init__(self, caller: str, server: ApiServerStandIn, tmp_path: Path, **kw: Any) -> None:
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        self.hook: Callable[[str], None] = lambda name: None
        self.stop = threading.Event()
        if caller == "extender":
            self.nodes: dict[str, dict] = {}
            self.reflector = Reflector(
                KubeLegacyApi(load_api_client(kubeconfig)),
                Source("nodes"),
                self._replace,
                self._apply,
                600,
                1,
                **kw,
            )
            self.thread = self.reflector.start(self.stop)
        else:
            self.informer = Informer(
                KubeCluster.from_config(kubeconfig), "nodes", self._changed, 600, 1, **kw
            )
            self.reflector = self.informer.reflector
            self.seen: set[str] = set()
            self.thread = self.reflector.start(self.stop)  # what Informer.start does, keeping the thread
        assert self.reflector.synced.wait(10)

    def names(self) -> set[str]:
        if hasattr(self, "informer"):
            return {o["metadata"]["name"] for o in self.informer.items()}
        return set(self.nodes)

    def _replace(self, items: list[dict]) -> None:
        self.nodes = {o["metadata"]["name"]: o for o in items}

    def _apply(self, kind: str, obj: dict) -> None:
        self.hook(obj["metadata"]["name"])
        if kind == "DELETED":
            self.nodes.pop(obj["metadata"]["name"], None)
        else:
            self.nodes[obj["metadata"]["name"]] = obj

    def _changed(self, plural: str) -> None:
        # The Informer tells only that something changed: a new name is what the event brought.
        if hasattr(self, "seen"):
            for name in self.names() - self.seen:
                self.hook(name)
                self.seen.add(name)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def server() -> Iterator[ApiServerStandIn]:
    s = ApiServerStandIn().start()
    s.max_watch_s = 1.0
    yield s
    s.stop()


@pytest.fixture(params=["extender", "controller"])
def follow(
    request: pytest.FixtureRequest, server: ApiServerStandIn, tmp_path: Path
) -> Iterator[Callable[..., Follower]]:
    made: list[Follower] = []

    def make(**kw: Any) -> Follower:
        made.append(Follower(request.param, server, tmp_path, **kw))
        return made[-1]

    yield make
    for f in made:
        f.close()


def test_events_arrive_by_the_watch_without_relisting(server, follow) -> None:
    seed(server, "n0")
    f = follow()
    assert f.names() == {"n0"}
    seed(server, "n1")
    wait_for(lambda: f.names() == {"n0", "n1"})
    server.delete("/api/v1/nodes/n0")
    wait_for(lambda: f.names() == {"n1"})
    time.sleep(1.5)  # a watch the server ended (1 s) is resumed, not replaced by a list
    seed(server, "n2")
    wait_for(lambda: f.names() == {"n1", "n2"})
    assert f.reflector.lists == 1


def test_gone_relists_and_keeps_following(server, follow) -> None:
    seed(server, "n0")
    f = follow()
    server.compact()  # the version the watch resumes from is no longer in the log
    seed(server, "n1")  # wakes the waiting watch: it gets 410 Expired
    wait_for(lambda: f.reflector.lists >= 2)
    wait_for(lambda: "n1" in f.names())
    lists = f.reflector.lists
    seed(server, "n2")  # and the new watch follows from the relist's version
    wait_for(lambda: "n2" in f.names())
    assert f.reflector.lists == lists


def test_failures_are_retried_with_bounded_backoff(server, follow) -> None:
    seed(server, "n0")
    server.fail_next("GET", "/api/v1/nodes", code=500, times=3)
    f = follow(backoff_s=0.01, max_backoff_s=0.05)
    assert f.names() == {"n0"}
    gets = [r for r in server.requests if r[:2] == ("GET", "/api/v1/nodes")]
    assert len(gets) >= 4  # three refused lists, then the one that worked
    # A watch that fails resumes from the known version: no relist needed.
    server.fail_next("GET", "/api/v1/nodes", code=503, times=2)
    seed(server, "n1")
    wait_for(lambda: "n1" in f.names())
    assert f.reflector.lists == 1
    assert [f.reflector.delay(n) for n in (1, 2, 3, 10)] == [0.01, 0.02, 0.04, 0.05]


def test_an_event_the_consumer_cannot_take_relists_instead_of_ending_the_thread(server, follow) -> None:
    seed(server, "n0")
    f = follow(backoff_s=0.01)
    bad = {"once": True}

    def hook(name: str) -> None:
        if name == "n1" and bad.pop("once", False):
            raise KeyError("spec")  # e.g. a field the consumer did not expect

    f.hook = hook
    seed(server, "n1")
    wait_for(lambda: f.reflector.lists == 2)  # listed again (the list carries n1), then watched on
    seed(server, "n2")
    wait_for(lambda: "n2" in f.names())
    assert f.thread.is_alive() and f.names() == {"n0", "n1", "n2"}
