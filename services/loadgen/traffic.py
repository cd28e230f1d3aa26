"""Customer traffic, pure: which partition each request targets and what counts as an error.

Requests are uniform over all partitions, GSI partitions included (queries by alternate
key), and each goes to the one node holding the partition, with no failover: so the
customer error ratio is the traffic share of the nodes that refuse.

A GSI new in the map is not queried at once: as DynamoDB's indexes are queryable once ACTIVE,
customers query it once its owners have had a renewal period and an allowance to learn it from
their memberships (``Indexes``). Queried sooner, a node that has not renewed yet would answer
``wrong_owner``: errors of the lab's routing, not of the storm.
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

    def __init__(self, partition_map: PartitionMap, creating: frozenset[tuple[str, str]] = frozenset()) -> None:
        """``creating``: the (table, GSI) pairs not queried yet (Indexes.creating)."""
        self.version = partition_map.version
        self._starts: list[int] = []  # where each run of the sequence starts
        self._runs: list[tuple[str, str | None, tuple[str, ...]]] = []  # (table, index or None, owners)
        size = 0
        for table, route in sorted(partition_map.tables.items()):
            for index, owners in [(None, route.owners), *((gsi, route.gsi_owners()) for gsi in route.gsis)]:
                if owners and (index is None or (table, index) not in creating):
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


class Indexes:
    """When each GSI was first seen in the map, and so which ones customers do not query yet: a
    GSI is CREATING for ``activation_s`` (wall seconds: a renewal period and an allowance) from the
    map that first showed it; the map the customers start with is taken as it is (the lab's nodes
    start with those memberships). A GSI gone from the map is forgotten (added again, it is new)."""

    def __init__(self, activation_s: float) -> None:
        self.activation_s = activation_s
        self.first_seen: dict[tuple[str, str], float] = {}
        self.started = False

    def seen(self, partition_map: PartitionMap, now: float) -> None:
        present = {(table, gsi) for table, route in partition_map.tables.items() for gsi in route.gsis}
        since = now if self.started else float("-inf")
        self.first_seen = {key: self.first_seen.get(key, since) for key in present}
        self.started = True

    def creating(self, now: float) -> frozenset[tuple[str, str]]:
        return frozenset(key for key, seen in self.first_seen.items() if now - seen < self.activation_s)

    def next_active(self, now: float) -> float | None:
        """When the next CREATING GSI becomes ACTIVE (None: none is creating)."""
        return min((seen + self.activation_s for seen in self.first_seen.values() if now - seen < self.activation_s), default=None)


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
