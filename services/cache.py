"""Rows of the lab's tables cached by a dependent service (pure).

An entry older than the TTL must be refreshed from the table before it is used. In 2015 a
refresh that failed failed the call: SQS's queue metadata once DynamoDB's traffic was disabled
(5:45 AM), CloudWatch's namespaces and enrichment. AWS's fixes keep serving from a stale entry
when the table cannot be reached (``serve_stale``).
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

    def fresh(self, key: str, now: float) -> bool:
        entry = self.entries.get(key)
        return entry is not None and now - entry[1] < self.ttl_s

    def store(self, key: str, row: Any, now: float) -> None:
        self.entries.pop(key, None)  # to the end: the dict keeps entries in the order they were fetched
        self.entries[key] = (row, now)
        while len(self.entries) > self.max_entries:
            del self.entries[next(iter(self.entries))]

    def after_failed_refresh(self, key: str) -> bool:
        """May a call go on when its row could not be refreshed (a stale copy, by the fix)?"""
        return self.serve_stale and key in self.entries

    def usable(self, key: str, now: float) -> bool:
        """Fresh, or stale and allowed."""
        return self.fresh(key, now) or self.after_failed_refresh(key)

    def oldest_age_s(self, now: float) -> float:
        return max((now - at for _, at in self.entries.values()), default=0.0)
