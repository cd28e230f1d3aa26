"""The queue service's cache of queue metadata (pure): what SQS did with its DynamoDB table.

Send and receive use the cached metadata of their queue; an entry older than the TTL must be
refreshed from the table first. In 2015 a refresh that failed failed the call: when DynamoDB's
traffic was disabled for the recovery (5:45 AM), queue errors rose. AWS's fix, a switch here:
keep serving from a stale entry when the table cannot be reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class MetadataCache:
    ttl_s: float
    serve_stale: bool
    entries: dict[str, tuple[dict[str, Any], float]] = field(default_factory=dict)  # queue -> (metadata, fetched at)

    def fresh(self, queue: str, now: float) -> bool:
        entry = self.entries.get(queue)
        return entry is not None and now - entry[1] < self.ttl_s

    def store(self, queue: str, metadata: dict[str, Any], now: float) -> None:
        self.entries[queue] = (metadata, now)

    def after_failed_refresh(self, queue: str) -> bool:
        """May a call go on when its queue's metadata could not be refreshed?"""
        return self.serve_stale and queue in self.entries

    def oldest_age_s(self, now: float) -> float:
        return max((now - at for _, at in self.entries.values()), default=0.0)
