"""The allocator's counters, which the throughput benchmark prints (docs/performance.md's cache hit rate)."""

from allocator_fixtures import CLASSES, claim, dev, exactly, slice_

from driver.allocator import Allocator


def test_cache_hit_rate_is_hits_over_lookups():
    a = Allocator([slice_("s", [dev("g0", multi=True), dev("g1", multi=True)])], CLASSES)
    assert a.stats["cel_cache_hit_rate"] == 0.0  # nothing looked up yet: no division by zero
    for k in range(3):
        a.allocate(claim(f"c{k}", exactly("r")))
    stats = a.stats
    hits, misses = stats["cel_cache_hits"], stats["cel_cache_misses"]
    assert hits > 0 and misses > 0  # the first claim fills the cache, the others read it
    assert stats["cel_cache_hit_rate"] == hits / (hits + misses)
    assert 0 < stats["cel_cache_hit_rate"] < 1
