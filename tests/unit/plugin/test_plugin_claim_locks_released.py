"""The per-claim locks (driver/plugin/state/locks.py) are dropped when their last holder lets go: a node
prepares and unprepares claims for months, and a lock kept per claim uid ever seen would grow
without bound."""

from __future__ import annotations

from driver.plugin.state.locks import ClaimLocks


def test_a_claims_lock_is_gone_once_its_holders_let_go():
    locks = ClaimLocks()
    for uid in ("uid-a", "uid-b", "uid-c"):
        with locks.hold(uid):
            assert len(locks) == 1
    assert len(locks) == 0
