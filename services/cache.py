"""Rows of the lab's tables cached by a dependent service (pure).

An entry older than the TTL must be refreshed from the table before it is used. What happens
when that refresh fails depends on the cache:

- Row by row (CloudWatch's enrichment of each datapoint with its group): the row is not
  usable, a gap in that group's series.
- While most of the table answers (``ride_out``: SQS's queue metadata, CloudWatch's
  namespaces): a row whose refresh failed is served from the cache as long as at least half of
  the cached rows' last refreshes succeeded. SQS's caches "were not in the send/receive path":
  through the storm, which disqualifies the nodes holding a minority of any table's rows, the
  queues kept serving; once DynamoDB's traffic was held back (5:45 AM) most refreshes failed
  and so did the calls.
- AWS's fix (``serve_stale``): keep serving a stale entry when the table cannot be reached at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TtlCache:
    ttl_s: float
    serve_stale: bool
    entries: dict[str, tuple[Any, float]] = field(default_factory=dict)  # key -> (row, fetched at)
    max_entries: int = 10_000  # past this the entry fetched longest ago goes (the callers name the keys)
    ride_out: bool = False  # serve a row whose refresh failed while at least half the rows' last refreshes succeeded
    failing: set[str] = field(default_factory=set)  # cached rows whose last refresh failed

    def fresh(self, key: str, now: float) -> bool:
        entry = self.entries.get(key)
        return entry is not None and now - entry[1] < self.ttl_s

    def store(self, key: str, row: Any, now: float) -> None:
        self.entries.pop(key, None)  # to the end: the dict keeps entries in the order they were fetched
        self.entries[key] = (row, now)
        self.failing.discard(key)
        while len(self.entries) > self.max_entries:
            self.failing.discard(oldest := next(iter(self.entries)))
            del self.entries[oldest]

    def refresh_failed(self, key: str) -> bool:
        """A row's refresh failed: may the call go on with its cached copy (by the fix, or, riding
        out, while at least half of the cached rows' last refreshes succeeded)?"""
        if key not in self.entries:
            return False  # never fetched: nothing to serve
        self.failing.add(key)
        return self.serve_stale or (self.ride_out and 2 * len(self.failing) <= len(self.entries))

    def usable(self, key: str, now: float) -> bool:
        """Fresh, or stale and allowed by the fix (a row by row cache's question)."""
        return self.fresh(key, now) or (self.serve_stale and key in self.entries)

    def oldest_age_s(self, now: float) -> float:
        return max((now - at for _, at in self.entries.values()), default=0.0)
