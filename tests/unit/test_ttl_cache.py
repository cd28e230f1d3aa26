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
    assert not plain.after_failed_refresh("q-0")
    assert fixed.after_failed_refresh("q-0")
    assert not fixed.after_failed_refresh("q-1")  # never seen: nothing stale to serve
