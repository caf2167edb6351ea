"""The clear at unprepare starts from the claim as the API server answered our last write: one round trip
(the write) instead of two. A copy gone stale (another writer, the claim re-created under its name) is a
Conflict that re-reads, never another driver's entry lost or a new claim touched; without a copy (a plugin
restarted since the write) the clear reads the claim as before. A claim prepared and unprepared before its
report went out (StatusQueue: the clear replaces the write) costs no API call when the claim as read at its
prepare holds no entry of ours, and one write when it does (left by an earlier plugin process)."""

from __future__ import annotations

from support.counting_cluster import OTHER, OURS, REF, CountingCluster, with_claim

from driver.cluster import LocalCluster
from driver.plugin.claims.status import ClaimStatusWriter, KubeletCalls, StatusQueue


def _devices(cluster: LocalCluster) -> list[dict]:
    return LocalCluster.get_resource_claim(cluster, "ml", "c")["status"].get("devices", [])


def _written(writer: ClaimStatusWriter, cluster: CountingCluster) -> None:
    assert writer.write(REF, [OURS], LocalCluster.get_resource_claim(cluster, "ml", "c"))
    cluster.reads = cluster.writes = 0


def test_a_clear_after_our_write_is_one_write_and_no_read():
    cluster = with_claim()
    writer = ClaimStatusWriter(cluster)
    _written(writer, cluster)
    assert writer.clear(REF)
    assert (cluster.reads, cluster.writes) == (0, 1)
    assert _devices(cluster) == []


def test_a_second_clear_reads_again_and_writes_nothing():
    cluster = with_claim()
    writer = ClaimStatusWriter(cluster)
    _written(writer, cluster)
    assert writer.clear(REF)
    cluster.reads = cluster.writes = 0
    assert writer.clear(REF)  # the copy was dropped: read, find nothing of ours, leave the claim alone
    assert (cluster.reads, cluster.writes) == (1, 0)


def test_another_drivers_entry_written_since_our_write_is_kept():
    cluster = with_claim()
    writer = ClaimStatusWriter(cluster, sleep=lambda _s: None)
    _written(writer, cluster)
    fresh = LocalCluster.get_resource_claim(cluster, "ml", "c")
    cluster.update_resource_claim_status({**fresh, "status": {**fresh["status"], "devices": [OTHER, OURS]}})
    cluster.reads = cluster.writes = 0
    assert writer.clear(REF)
    assert cluster.reads == 1  # the stale copy's Conflict, then the re-read
    assert _devices(cluster) == [OTHER]


def test_a_claim_re_created_under_the_name_is_not_touched():
    cluster = with_claim()
    writer = ClaimStatusWriter(cluster, sleep=lambda _s: None)
    _written(writer, cluster)
    # The claim was deleted and a new one made under its name, with our driver's entry of its own prepare.
    cluster.delete_resource_claim("ml", "c")
    cluster.put_resource_claim(
        {"metadata": {"name": "c", "namespace": "ml", "uid": "uid-2"}, "status": {"devices": [OURS]}}
    )
    assert not writer.clear(REF)
    assert _devices(cluster) == [OURS]


def test_without_a_copy_the_clear_reads_the_claim():
    cluster = with_claim()
    _written(ClaimStatusWriter(cluster), cluster)
    restarted = ClaimStatusWriter(cluster)  # a new plugin process: nothing written by it
    assert restarted.clear(REF)
    assert (cluster.reads, cluster.writes) == (1, 1)
    assert _devices(cluster) == []


def _burst(cluster: CountingCluster, clears: int = 1) -> None:
    """Prepare and unprepare within one burst: the write is still queued (a kubelet call in flight) when the
    clear replaces it (`clears` > 1: an unprepare retried before the first clear went out)."""
    calls = KubeletCalls()
    queue = StatusQueue(ClaimStatusWriter(cluster), calls=calls, yield_s=30)
    read_at_prepare = LocalCluster.get_resource_claim(cluster, "ml", "c")
    cluster.reads = cluster.writes = 0
    with calls.serving():
        queue.write(REF, [OURS], read_at_prepare)
        for _ in range(clears):
            queue.clear(REF)
    assert queue.flush(5)
    queue.close(5)


def test_a_claim_unprepared_before_its_report_went_out_costs_no_api_call():
    cluster = with_claim()
    _burst(cluster)
    assert (cluster.reads, cluster.writes) == (0, 0)
    assert _devices(cluster) == []


def test_our_entry_left_by_an_earlier_process_is_cleared_from_the_prepares_copy():
    cluster = with_claim()
    fresh = LocalCluster.get_resource_claim(cluster, "ml", "c")
    cluster.update_resource_claim_status({**fresh, "status": {**fresh["status"], "devices": [OTHER, OURS]}})
    _burst(cluster)
    assert (cluster.reads, cluster.writes) == (0, 1)
    assert _devices(cluster) == [OTHER]


def test_a_stale_copy_is_read_again_at_once_and_only_contention_backs_off():
    cluster = with_claim()
    slept: list[float] = []
    writer = ClaimStatusWriter(cluster, sleep=slept.append)
    _written(writer, cluster)
    fresh = LocalCluster.get_resource_claim(cluster, "ml", "c")
    cluster.update_resource_claim_status({**fresh, "status": {**fresh["status"], "devices": [OTHER, OURS]}})
    assert writer.clear(REF)
    assert slept == []  # the copy's Conflict: re-read without waiting
    assert _devices(cluster) == [OTHER]

    class Contended(CountingCluster):
        """Another writer changes the claim between each of our reads and writes, twice."""

        def __init__(self):
            super().__init__()
            self.races = 2

        def get_resource_claim(self, namespace, name):
            got = super().get_resource_claim(namespace, name)
            if self.races:
                self.races -= 1
                LocalCluster.update_resource_claim_status(self, {**got, "status": dict(got["status"])})
            return got

    contended = Contended()
    contended.put_claim()
    slept.clear()
    assert ClaimStatusWriter(contended, sleep=slept.append).write(REF, [OURS])
    assert slept == [0.05, 0.1]  # two fresh reads lost their race: backed off, doubling
    assert _devices(contended) == [OURS]


def test_a_second_clear_carries_the_prepares_copy_on():
    """An unprepare retried before the first clear went out: the second clear replaces the first and starts
    from the same copy, still no API call."""
    cluster = with_claim()
    _burst(cluster, clears=2)
    assert (cluster.reads, cluster.writes) == (0, 0)
