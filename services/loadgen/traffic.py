"""Customer traffic, pure: which partition each request targets and what counts as an error.

Requests are uniform over all partitions, GSI partitions included (queries by alternate
key), and each goes to the one node holding the partition, with no failover: so the
customer error ratio is the traffic share of the nodes that refuse.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from stormcore.fleet import rack_of
from stormcore.wire import PartitionMap

OUTCOMES = ("ok", "not_found", "refused", "wrong_owner", "timeout", "error")
FAILURES = frozenset({"refused", "wrong_owner", "timeout", "error"})
KEYS_PER_PARTITION = 50


@dataclass(frozen=True)
class Request:
    method: str
    table: str
    index: str | None
    partition: int
    key: str
    node: str
    rack: int


class Routes:
    def __init__(self, partition_map: PartitionMap) -> None:
        self.version = partition_map.version
        self.targets: list[tuple[str, str | None, int, str]] = []
        for table, route in sorted(partition_map.tables.items()):
            self.targets.extend((table, None, p, owner) for p, owner in enumerate(route.owners))
            for index in route.gsis:
                self.targets.extend((table, index, p, owner) for p, owner in enumerate(route.gsi_owners()))
        self.tables = sorted(partition_map.tables)

    def pick(self, rng: random.Random) -> Request:
        table, index, partition, owner = rng.choice(self.targets)
        method = "GET" if index is not None or rng.random() < 0.5 else "PUT"
        key = f"item-{rng.randrange(KEYS_PER_PARTITION)}"
        return Request(method, table, index, partition, key, owner, rack_of(owner))


def outcome(status: int, error: str | None) -> str:
    """A response's outcome for the customer: a missing item is an answer, a refusal is not."""
    if status == 200:
        return "ok"
    if status == 404 and error == "not_found":
        return "not_found"
    if status == 503:
        return "refused"
    if status == 409:
        return "wrong_owner"
    return "error"


def due(rate_per_s: float, elapsed_s: float, sent: int) -> int:
    """How many requests are due after ``elapsed_s`` at a fixed rate, given ``sent`` so far."""
    return max(0, int(rate_per_s * elapsed_s) - sent)
