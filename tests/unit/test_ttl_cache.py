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
    assert not plain.after_failed_refresh("q-0", 6.0)
    assert fixed.after_failed_refresh("q-0", 600.0)
    assert not fixed.after_failed_refresh("q-1", 6.0)  # never seen: nothing stale to serve


def test_a_cache_that_serves_while_refreshing_rides_out_failed_refreshes_but_not_a_total_outage():
    """SQS's caches in 2015: a row whose refresh fails is served from the cache while the cache's
    other refreshes succeed (one within the TTL); once none has for a TTL, the call fails."""
    cache = TtlCache(5.0, serve_stale=False, while_refreshing=True)
    cache.store("q-0", {"queue": "q-0"}, now=0.0)  # its node is then disqualified: never refreshed again
    cache.store("q-1", {"queue": "q-1"}, now=0.0)
    for t in (5.0, 9.0, 13.0):  # q-1's refreshes go on succeeding; q-0's fail
        cache.store("q-1", {"queue": "q-1"}, now=t)
        assert not cache.fresh("q-0", t) and cache.after_failed_refresh("q-0", t) and cache.usable("q-0", t)
    assert cache.after_failed_refresh("q-0", 17.9)  # the last success was at 13: still within the TTL
    assert not cache.after_failed_refresh("q-0", 18.0) and not cache.usable("q-1", 18.0)  # no refresh for a TTL
    assert not cache.after_failed_refresh("q-2", 14.0)  # never seen: nothing to serve


def test_the_cache_is_bounded_and_drops_what_was_fetched_longest_ago():
    cache = TtlCache(ttl_s=5.0, serve_stale=True, max_entries=3)
    for i, key in enumerate(["a", "b", "c"]):
        cache.store(key, i, now=float(i))
    cache.store("a", 10, now=3.0)  # fetched again: now the newest
    cache.store("d", 11, now=4.0)  # one too many: b goes, fetched longest ago
    assert list(cache.entries) == ["c", "a", "d"] and cache.fresh("a", 4.0)
    for i in range(1000):  # names a client makes up cannot grow it
        cache.store(f"ns-{i}", i, now=5.0)
    assert len(cache.entries) == 3
