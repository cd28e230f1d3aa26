"""Customer traffic, pure: which partition each request targets and what counts as an error.

Requests are uniform over all partitions, GSI partitions included (queries by alternate
key), and each goes to the one node holding the partition, with no failover: so the
customer error ratio is the traffic share of the nodes that refuse.
"""

from __future__ import annotations

import bisect
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
    """Every partition of every table and GSI, numbered in one sequence (table by table, a table's
    own partitions then each GSI's), without building the sequence: a fleet of 10,000 nodes has
    ~300,000 of them, and a new map must not stall the loop that routes by it."""

    def __init__(self, partition_map: PartitionMap) -> None:
        self.version = partition_map.version
        self._starts: list[int] = []  # where each run of the sequence starts
        self._runs: list[tuple[str, str | None, tuple[str, ...]]] = []  # (table, index or None, owners)
        size = 0
        for table, route in sorted(partition_map.tables.items()):
            for index, owners in [(None, route.owners), *((gsi, route.gsi_owners()) for gsi in route.gsis)]:
                if owners:
                    self._starts.append(size)
                    self._runs.append((table, index, owners))
                    size += len(owners)
        self.size = size
        self.tables = sorted(partition_map.tables)

    def target(self, i: int) -> tuple[str, str | None, int, str]:
        """The ``i``-th partition of the sequence: (table, index, partition, its owner)."""
        run = bisect.bisect_right(self._starts, i) - 1
        table, index, owners = self._runs[run]
        partition = i - self._starts[run]
        return table, index, partition, owners[partition]

    @property
    def targets(self) -> list[tuple[str, str | None, int, str]]:
        """The whole sequence (built on demand: for tests and tools, not the request path)."""
        return [self.target(i) for i in range(self.size)]

    def pick(self, rng: random.Random) -> Request:
        table, index, partition, owner = self.target(rng.choice(range(self.size)))  # uniform, as choice over the sequence
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
