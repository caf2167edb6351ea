"""The status report after prepare starts from the claim the prepare read: one API round trip (the write)
instead of two, and a copy that went stale meanwhile is a Conflict that re-reads, never a lost entry."""

from __future__ import annotations

from support.counting_cluster import OTHER, OURS, REF, with_claim

from driver.plugin.claims.status import ClaimStatusWriter, StatusQueue


def test_the_claim_read_at_prepare_is_written_from_without_a_second_read():
    cluster = with_claim()
    read_at_prepare = cluster.get_resource_claim("ml", "c")
    cluster.reads = 0
    assert ClaimStatusWriter(cluster).write(REF, [OURS], read_at_prepare)
    assert cluster.reads == 0
    assert cluster.get_resource_claim("ml", "c")["status"]["devices"] == [OURS]


def test_a_copy_gone_stale_is_a_conflict_that_re_reads_and_keeps_the_other_drivers_entry():
    cluster = with_claim()
    read_at_prepare = cluster.get_resource_claim("ml", "c")
    # Another driver reports on the claim between our prepare's read and our report.
    fresh = cluster.get_resource_claim("ml", "c")
    cluster.update_resource_claim_status({**fresh, "status": {**fresh["status"], "devices": [OTHER]}})
    cluster.reads = 0
    assert ClaimStatusWriter(cluster, sleep=lambda _s: None).write(REF, [OURS], read_at_prepare)
    assert cluster.reads == 1  # the conflict's re-read
    assert cluster.get_resource_claim("ml", "c")["status"]["devices"] == [OTHER, OURS]


def test_the_queue_hands_the_prepares_claim_to_the_writer():
    cluster = with_claim()
    read_at_prepare = cluster.get_resource_claim("ml", "c")
    cluster.reads = 0
    queue = StatusQueue(ClaimStatusWriter(cluster))
    queue.write(REF, [OURS], read_at_prepare)
    assert queue.flush(5)
    queue.close(2.0)
    assert cluster.reads == 0
    assert cluster.get_resource_claim("ml", "c")["status"]["devices"] == [OURS]
