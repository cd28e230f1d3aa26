"""Rows of the lab's tables cached by a dependent service (pure).

An entry older than the TTL must be refreshed from the table before it is used. In 2015 a
refresh that failed failed the call: CloudWatch's namespaces and enrichment row by row; SQS's
queue metadata once none of its refreshes could succeed, when DynamoDB's traffic was disabled
(5:45 AM). SQS's caches "were not in the send/receive path": through the storm, while its
refreshes went on succeeding often enough (at least one within the TTL, ``while_refreshing``),
a row whose own refresh failed was served from the cache. AWS's fixes keep serving from a
stale entry when the table cannot be reached at all (``serve_stale``).
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
    while_refreshing: bool = False  # a stale entry serves while another refresh succeeded within the TTL
    refreshed_at: float | None = None  # the last refresh that succeeded, of any entry

    def fresh(self, key: str, now: float) -> bool:
        entry = self.entries.get(key)
        return entry is not None and now - entry[1] < self.ttl_s

    def store(self, key: str, row: Any, now: float) -> None:
        self.entries.pop(key, None)  # to the end: the dict keeps entries in the order they were fetched
        self.entries[key] = (row, now)
        self.refreshed_at = now
        while len(self.entries) > self.max_entries:
            del self.entries[next(iter(self.entries))]

    def refreshing(self, now: float) -> bool:
        """Has a refresh (of any entry) succeeded within the TTL?"""
        return self.refreshed_at is not None and now - self.refreshed_at < self.ttl_s

    def after_failed_refresh(self, key: str, now: float) -> bool:
        """May a call go on when its row could not be refreshed (a stale copy: by the fix, or
        while the cache's other refreshes succeed)?"""
        return key in self.entries and (self.serve_stale or (self.while_refreshing and self.refreshing(now)))

    def usable(self, key: str, now: float) -> bool:
        """Fresh, or stale and allowed."""
        return self.fresh(key, now) or self.after_failed_refresh(key, now)

    def oldest_age_s(self, now: float) -> float:
        return max((now - at for _, at in self.entries.values()), default=0.0)
