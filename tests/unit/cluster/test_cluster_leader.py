"""The shared Lease elector (driver/cluster/leader.py), run through both stores it has callers for: the
legacy extender's `LegacyApi` (MemoryLegacyApi) and the controller's `ObjectApi` (LocalCluster through
`ObjectLeases`). Clocks are fakes, so expiry is exact."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import pytest

from driver.cluster import LocalCluster
from driver.cluster.base import ClusterError, NotFound
from driver.cluster.leader import LeaderElector, LeaseStore, ObjectLeases, micro_time
from driver.legacy.kubeapi import MemoryLegacyApi

NS, NAME = "carve", "lease"


class Clock:
    def __init__(self) -> None:
        self.wall, self.mono = 1000.0, 0.0

    def advance(self, s: float) -> None:
        self.wall += s
        self.mono += s


@pytest.fixture(params=["extender", "controller"])
def store(request: pytest.FixtureRequest) -> LeaseStore:
    return MemoryLegacyApi() if request.param == "extender" else ObjectLeases(LocalCluster())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def elector(store: LeaseStore, clock: Clock) -> Callable[..., LeaderElector]:
    def make(identity: str, s: LeaseStore = store) -> LeaderElector:
        return LeaderElector(
            s,
            NS,
            NAME,
            identity,
            lease_s=15,
            renew_s=5,
            clock=lambda: clock.wall,
            monotonic=lambda: clock.mono,
        )

    return make


def test_one_leader_renews_and_another_takes_over_only_after_expiry(store, clock, elector) -> None:
    a, b = elector("a"), elector("b")
    assert a.try_acquire() and a.is_leader
    assert not b.try_acquire() and not b.is_leader
    clock.advance(10)
    assert not b.try_acquire()  # a renewed 10 s ago: its 15 s Lease still holds
    assert a.try_acquire()  # renewal
    clock.advance(15)  # exactly renewTime + duration: still held
    assert not b.try_acquire()
    assert not a.is_leader  # a stopped acting lease_s - renew_s after its last renewal, before b could
    clock.advance(1)
    assert b.try_acquire() and b.is_leader
    spec = store.get_lease(NS, NAME)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert spec["renewTime"] == micro_time(clock.wall) and spec["acquireTime"] == micro_time(clock.wall)
    assert not a.try_acquire() and not a.is_leader


class Failing:
    """A store whose next calls of one kind fail."""

    def __init__(self, inner: LeaseStore, method: str, error: Exception) -> None:
        self.inner, self.method, self.error, self.fail = inner, method, error, True

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if name != self.method or not self.fail:
            return real

        def failing(*args: Any) -> Any:
            raise self.error

        return failing


@pytest.mark.parametrize("method", ["get_lease", "update_lease"])
def test_a_failed_renewal_ends_the_leadership_at_once(store, clock, elector, method, request) -> None:
    events: list[str] = []
    seen = logging.Handler(logging.INFO)
    seen.emit = lambda record: events.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("driver.cluster.leader")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(seen)  # on the logger itself: logfmt.setup() may have stopped "driver" propagating
    request.addfinalizer(lambda: (logger.removeHandler(seen), logger.setLevel(level)))
    failing = Failing(store, method, ClusterError("Lease: 503", "Lease", NAME, NS, 503))
    a = elector("a", failing)
    failing.fail = False
    assert a.try_acquire() and a.is_leader
    failing.fail = True
    clock.advance(5)
    assert not a.try_acquire() and not a.is_leader  # the extender must not collect; the controller not plan
    assert events == [
        "leader.acquired",
        "leader.renew-failed",
        "leader.lost",
    ]
    failing.fail = False
    assert a.try_acquire() and a.is_leader  # its own Lease: renewed again


class ReadBefore:
    """A store whose reads answer what an earlier read did (None: NotFound): a race another replica won."""

    def __init__(self, inner: LeaseStore, read: dict | None) -> None:
        self.inner, self.read = inner, read

    def get_lease(self, namespace: str, name: str) -> dict:
        if self.read is None:
            raise NotFound("Lease: 404", "Lease", name, namespace, 404)
        return copy.deepcopy(self.read)

    def create_lease(self, obj: dict) -> dict:
        return self.inner.create_lease(obj)

    def update_lease(self, obj: dict) -> dict:
        return self.inner.update_lease(obj)


def test_a_lost_race_leaves_a_follower(store, clock, elector) -> None:
    assert elector("a").try_acquire()
    clock.advance(20)  # expired: b and c both read it, b's write lands first
    read = store.get_lease(NS, NAME)
    assert elector("b").try_acquire()
    c = elector("c", ReadBefore(store, read))
    assert not c.try_acquire() and not c.is_leader  # its write carried the version before b's: Conflict
    assert store.get_lease(NS, NAME)["spec"]["holderIdentity"] == "b"


def test_a_create_that_finds_the_lease_there_leaves_a_follower(store, clock, elector) -> None:
    a = elector("a", ReadBefore(store, None))  # read before b created it
    assert elector("b").try_acquire()
    assert not a.try_acquire() and not a.is_leader
    assert store.get_lease(NS, NAME)["spec"]["holderIdentity"] == "b"


def test_unknown_spec_fields_are_kept_and_an_unreadable_renew_time_is_expired(store, clock, elector) -> None:
    a = elector("a")
    assert a.try_acquire()
    lease = store.get_lease(NS, NAME)
    lease["spec"].update(holderIdentity="x", renewTime="yesterday", preferredHolder="a", strategy="Older")
    store.update_lease(lease)
    assert a.try_acquire()  # x's renewal cannot be read: the Lease is free
    spec = store.get_lease(NS, NAME)["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 1
    assert spec["preferredHolder"] == "a" and spec["strategy"] == "Older"


def test_renew_interval_must_be_shorter_than_the_lease(store) -> None:
    with pytest.raises(ValueError, match="renew interval 15s must be shorter than the lease 15s"):
        LeaderElector(store, NS, NAME, "a", lease_s=15, renew_s=15)
