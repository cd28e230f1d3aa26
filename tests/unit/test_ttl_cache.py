"""A dependent service's cache of table rows (pure): refreshed within a TTL, or stale by the fix."""

from services.cache import TtlCache


def test_an_entry_is_fresh_for_its_ttl_then_must_be_refreshed():
    cache = TtlCache(ttl_s=5.0, serve_stale=False)
    assert not cache.fresh("q-0", 0.0)
    cache.store("q-0", {"queue": "q-0"}, now=10.0)
    assert cache.fresh("q-0", 14.9) and not cache.fresh("q-0", 15.0)
    assert cache.oldest_age_s(18.0) == 8.0


def test_a_failed_refresh_fails_the_call_unless_the_stale_cache_fix_is_on():
    plain, fixed = TtlCache(5.0, serve_stale=False), TtlCache(5.0, serve_stale=True)
    for cache in (plain, fixed):
        cache.store("q-0", {"queue": "q-0"}, now=0.0)
    assert not plain.refresh_failed("q-0")
    assert fixed.refresh_failed("q-0")
    assert not fixed.refresh_failed("q-1")  # never seen: nothing stale to serve
    assert not plain.usable("q-0", 6.0) and fixed.usable("q-0", 600.0)


def test_a_cache_that_rides_out_serves_a_failed_row_while_most_rows_refresh():
    """SQS's caches in 2015: a row whose refresh fails is served from the cache while at least
    half of the cached rows' last refreshes succeeded; when most fail, the calls fail too."""
    cache = TtlCache(5.0, serve_stale=False, ride_out=True)
    for q in ("q-0", "q-1", "q-2", "q-3"):
        cache.store(q, {"queue": q}, now=0.0)
    assert cache.refresh_failed("q-0") and cache.refresh_failed("q-1")  # 2 of 4 failing: served
    assert not cache.refresh_failed("q-2")  # 3 of 4: the table is mostly out of reach
    assert not cache.refresh_failed("q-0")
    cache.store("q-2", {"queue": "q-2"}, now=6.0)  # it answers again
    cache.store("q-1", {"queue": "q-1"}, now=6.0)
    assert cache.failing == {"q-0"} and cache.refresh_failed("q-0")  # 1 of 4: served again
    assert not cache.refresh_failed("q-9")  # never seen: nothing to serve


def test_the_cache_is_bounded_and_drops_what_was_fetched_longest_ago():
    cache = TtlCache(ttl_s=5.0, serve_stale=True, max_entries=3)
    for i, key in enumerate(["a", "b", "c"]):
        cache.store(key, i, now=float(i))
    cache.store("a", 10, now=3.0)  # fetched again: now the newest
    cache.store("d", 11, now=4.0)  # one too many: b goes, fetched longest ago
    assert list(cache.entries) == ["c", "a", "d"] and cache.fresh("a", 4.0)
    for i in range(1000):  # names a client makes up cannot grow it
        cache.store(f"ns-{i}", i, now=5.0)
        cache.refresh_failed(f"ns-{i}")
    assert len(cache.entries) == 3 and cache.failing <= set(cache.entries)
