"""The membership store: tables, partitions, GSI partitions and which node holds each.

A node's membership is the list of partitions assigned to it, one entry per partition of a
table or of one of its Global Secondary Indexes. Where each partition sits follows one rule
(``for_fleet``), with nothing in it naming a table:

- The fleet has two instance classes: ``big_per_every`` of every ``big_every`` nodes (every rack
  its share) are large instances with ``big_base_entries`` slots for table partitions, the rest
  standard ones with ``small_entries``.
- Every table's partitions are dealt over every slot of every node in proportion to the table's
  weight in the profile (``TABLES``), so every table has partitions on both classes, in
  proportion to their slots.
- A GSI's partitions live on the large instances (the index class): each large instance keeps
  ``big_base_entries`` index slots, dealt among the indexed tables by weight; a table's GSIs are
  partitioned alike, partition p of each on the same node. Under GSI growth each indexed table
  carries ``big_gsis`` GSIs, so the large instances' memberships grow several times larger while
  everyone else's stay small: the margin erosion of 2015.

Which service's table fails first in a storm then follows from where the rule put its
partitions and which nodes the storm disqualifies, not from a list.

Pure data: no I/O. Encoded membership payloads are cached per node and rebuilt only when
the store changes, so answering a renewal costs the real process almost nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from stormcore.fleet import cell_racks, holds_gsi_heavy, node_id, node_index, rack_of
from stormcore.settings import LabSettings
from stormcore.wire import Membership, MembershipEntry, PartitionMap, TableRoute


@dataclass(frozen=True)
class TableProfile:
    weight: int  # its share of the fleet's table partitions
    indexed: bool = False  # its customers query it by alternate keys: big_gsis GSIs under GSI growth


# The profile's tables, the control-plane state of the services that cascaded in 2015 among them.
# The weights set each table's share of the partitions (so of the customer traffic); which tables
# carry GSIs is the profile's too: the customers' large tables did, the services' own did not.
# metric-groups is small: when the metadata behind it is stuck (the Monday tail) its customers
# fail while the aggregate error stays in the account's 0.15-0.25%.
TABLES = {
    "orders": TableProfile(80),
    "carts": TableProfile(66),
    "sessions": TableProfile(66),
    "catalog": TableProfile(55, indexed=True),
    "clickstream": TableProfile(55, indexed=True),
    "scaling-groups": TableProfile(32),
    "queue-metadata": TableProfile(25),
    "metric-groups": TableProfile(1),
}
GSI_KEYS = ("by-brand", "by-price", "by-user", "by-time", "by-region", "by-status")
MAX_GSIS = 20
HASH_SPACE = 2**32


class UnknownTable(KeyError):
    pass


class TooManyGsis(ValueError):
    pass


@dataclass
class Table:
    name: str
    owners: list[str]  # owners[p] holds partition p of the table
    gsis: list[str] = field(default_factory=list)
    index_owners: list[str] = field(default_factory=list)  # index_owners[p] holds partition p of each of its GSIs

    @property
    def partitions(self) -> int:
        return len(self.owners)


class MembershipStore:
    def __init__(self, tables: list[Table], nodes: list[str], index_nodes: list[str] | None = None) -> None:
        self.tables = {t.name: t for t in tables}
        self.nodes = list(nodes)
        self.index_nodes = list(index_nodes or [])  # the fleet's large instances, where GSI partitions go
        self.version = 1
        self.stuck: set[str] = set()  # tables whose metadata partition stopped taking its share
        self._entries: dict[str, list[MembershipEntry]] = {}
        self._encoded: dict[str, bytes] = {}
        self._map: bytes | None = None
        self._rebuild()

    @classmethod
    def for_cell(cls, settings: LabSettings, cell: int) -> MembershipStore:
        """The fleet's tables, serving the memberships of one cell's nodes: the partition map
        stays the fleet's (customers route by it), the renewals are the cell's."""
        fleet = cls.for_fleet(settings)
        if settings.cells == 1:
            return fleet
        racks = set(cell_racks(cell, settings))
        return cls(list(fleet.tables.values()), [n for n in fleet.nodes if rack_of(n) in racks], fleet.index_nodes)

    @classmethod
    def for_fleet(cls, settings: LabSettings) -> MembershipStore:
        """The fleet's tables placed by the rule (the module's docstring)."""
        s = settings
        slots = {
            node_id(r, i): s.big_base_entries if holds_gsi_heavy(r, i, s) else s.small_entries
            for r in range(s.racks)
            for i in range(s.nodes_per_rack)
        }
        large = [n for n in slots if holds_gsi_heavy(rack_of(n), node_index(n), s)]
        owners = _deal({name: t.weight for name, t in TABLES.items()}, slots)
        index_owners = _deal({name: t.weight for name, t in TABLES.items() if t.indexed}, dict.fromkeys(large, s.big_base_entries))
        tables = [Table(name, owned, index_owners=index_owners.get(name, [])) for name, owned in owners.items() if owned]
        if s.gsi_growth:
            for table in tables:
                if table.index_owners:  # an indexed table (where there are large instances)
                    table.gsis = [f"{table.name}-{key}" for key in GSI_KEYS[: s.big_gsis]]
        return cls(tables, sorted(slots), large)

    def has_node(self, node: str) -> bool:
        return node in self._entries

    def entries(self, node: str) -> int:
        return len(self._entries[node])

    def membership(self, node: str) -> bytes:
        """The node's membership as the JSON bytes sent on the wire (encoded once per version)."""
        payload = self._encoded.get(node)
        if payload is None:
            payload = self._encoded[node] = Membership(node, self.version, tuple(self._entries[node])).encode()
        return payload

    def partition_map(self) -> bytes:
        """Routing for customers: who holds each partition of each table, and of its GSIs."""
        if self._map is None:
            self._map = PartitionMap(
                self.version,
                {
                    t.name: TableRoute(
                        tuple(t.owners), tuple(t.gsis), "updating" if t.name in self.stuck else "active", tuple(t.index_owners)
                    )
                    for t in self.tables.values()
                },
            ).encode()
        return self._map

    def add_gsis(self, table: str, count: int) -> int:
        """Customers adopt ``count`` more GSIs on ``table``; returns the table's GSI count."""
        t = self.tables.get(table)
        if t is None:
            raise UnknownTable(table)
        if len(t.gsis) + count > MAX_GSIS:
            raise TooManyGsis(f"{table} would have {len(t.gsis) + count} GSIs; the limit is {MAX_GSIS}")
        if count > 0 and not t.index_owners:  # its first GSI: as many partitions as the table, on the large instances
            where = self.index_nodes or t.owners
            t.index_owners = [where[p % len(where)] for p in range(t.partitions)]
        start = len(t.gsis)
        t.gsis.extend(f"{table}-gsi-{start + i + 1}" for i in range(count))
        self.version += 1
        self._rebuild()
        return len(t.gsis)

    def remove_gsis(self, table: str, names: list[str]) -> int:
        """Drop these GSIs of ``table`` (the ones a fault added); returns the table's GSI count."""
        t = self.tables[table]
        kept = [g for g in t.gsis if g not in names]
        if len(kept) != len(t.gsis):
            t.gsis = kept
            self.version += 1
            self._rebuild()
        return len(t.gsis)

    def stick(self, tables: list[str]) -> list[str]:
        """The metadata partition behind ``tables`` stops taking its share (the Monday tail): their
        partitions drop out of every membership, so the nodes refuse those customers
        (wrong owner) while everyone else is served. Returns the tables newly stuck."""
        unknown = [t for t in tables if t not in self.tables]
        if unknown:
            raise UnknownTable(", ".join(unknown))
        newly = [t for t in tables if t not in self.stuck]
        if newly:
            self.stuck.update(newly)
            self.version += 1
            self._rebuild()
        return newly

    def unstick(self, tables: list[str]) -> None:
        if self.stuck & set(tables):
            self.stuck -= set(tables)
            self.version += 1
            self._rebuild()

    def size_distribution(self) -> dict[int, int]:
        """Membership entries -> number of nodes with that many (the dimension AWS did not monitor)."""
        return dict(sorted(Counter(len(e) for e in self._entries.values()).items()))

    def _rebuild(self) -> None:
        entries: dict[str, list[MembershipEntry]] = {n: [] for n in self.nodes}
        for t in self.tables.values():
            if t.name in self.stuck:
                continue
            for index, owners in [(None, t.owners), *((gsi, t.index_owners) for gsi in t.gsis)]:
                width = HASH_SPACE // max(1, len(owners))
                for p, owner in enumerate(owners):
                    if owner in entries:  # another cell's node: that cell serves it
                        entries[owner].append(MembershipEntry(t.name, index, p, (p * width, (p + 1) * width - 1)))
        self._entries = entries
        self._encoded.clear()
        self._map = None


def _deal(weights: dict[str, int], slots: dict[str, int]) -> dict[str, list[str]]:
    """Fill every node's slots with partitions; the tables take turns in proportion to their
    weights (smooth weighted round robin), each node a run of the turns, so every node holds a
    mix of them. Partition p of a table goes to the p-th node dealt one of its turns, round by
    round (a table's partitions are spread over the fleet, not run together)."""
    turns = _interleave(weights)
    owners: dict[str, list[str]] = {name: [] for name in weights}
    if not turns:
        return owners
    start, first = {}, 0
    for node, count in slots.items():
        start[node], first = first, first + count
    for k in range(max(slots.values(), default=0)):
        for node, count in slots.items():
            if k < count:
                owners[turns[(start[node] + k) % len(turns)]].append(node)
    return owners


def _interleave(weights: dict[str, int]) -> list[str]:
    total, current, turns = sum(weights.values()), dict.fromkeys(weights, 0), []
    for _ in range(total):
        for name, weight in weights.items():
            current[name] += weight
        chosen = max(current, key=lambda name: current[name])
        current[chosen] -= total
        turns.append(chosen)
    return turns
