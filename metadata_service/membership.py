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

Pure data: no I/O. Who holds which partitions is worked out once (and again for a table only
when its first GSI places its index partitions); a change (GSIs added or removed, a table stuck)
then costs the event loop what it touches, not a rebuild of every membership: each node's
count and payload are worked out on its next renewal and cached until the next change, and the
partition map is joined from each table's encoded owners, encoded once. A GSI fault at 10,000
nodes costs the loop microseconds where a full rebuild took ~0.5 s.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from stormcore.fleet import cell_racks, holds_gsi_heavy, node_id, node_index, rack_of
from stormcore.settings import LabSettings
from stormcore.wire import Membership, MembershipEntry


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
        # node -> table -> (its partitions of the table, its partitions of each of the table's GSIs), in table order
        self._held: dict[str, dict[str, tuple[list[int], list[int]]]] = {}
        self._sizes: dict[str, int] = {}  # caches until the next change
        self._encoded: dict[str, bytes] = {}
        self._map: bytes | None = None
        self._owners_json: dict[tuple[str, str], bytes] = {}  # (table, "owners" | "index_owners") -> JSON, until re-placed
        self._place()

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
        return node in self._held

    def entries(self, node: str) -> int:
        size = self._sizes.get(node)
        if size is None:
            tables, stuck = self.tables, self.stuck
            size = self._sizes[node] = sum(
                len(own) + len(index) * len(tables[name].gsis) for name, (own, index) in self._held[node].items() if name not in stuck
            )
        return size

    def membership(self, node: str) -> bytes:
        """The node's membership as the JSON bytes sent on the wire (encoded once per version)."""
        payload = self._encoded.get(node)
        if payload is None:
            payload = self._encoded[node] = Membership(node, self.version, tuple(self._entries_of(node))).encode()
        return payload

    def _entries_of(self, node: str) -> list[MembershipEntry]:
        """Its entries in table order: a table's partitions, then each GSI's (as placed by the rule)."""
        entries: list[MembershipEntry] = []
        for name, (own, index) in self._held[node].items():
            if name in self.stuck:
                continue
            t = self.tables[name]
            width = HASH_SPACE // max(1, len(t.owners))
            entries.extend(MembershipEntry(name, None, p, (p * width, (p + 1) * width - 1)) for p in own)
            width = HASH_SPACE // max(1, len(t.index_owners))
            for gsi in t.gsis:
                entries.extend(MembershipEntry(name, gsi, p, (p * width, (p + 1) * width - 1)) for p in index)
        return entries

    def partition_map(self, tables: Sequence[str] | None = None) -> bytes:
        """Routing for customers: who holds each partition of each table (or of ``tables``, known
        ones: a service that reads only its own), and of its GSIs; the same bytes as
        ``PartitionMap.encode``, joined from each table's owners encoded once."""
        if tables is not None:
            return self._joined([self.tables[name] for name in tables])
        if self._map is None:
            self._map = self._joined(list(self.tables.values()))
        return self._map

    def _joined(self, tables: list[Table]) -> bytes:
        routes = []
        for t in tables:
            index_owners = self._owners(t, "index_owners") if t.gsis else b"[]"
            status = "updating" if t.name in self.stuck else "active"
            routes.append(
                b'%s:{"owners":%s,"gsis":%s,"index_owners":%s,"status":%s}'
                % (_json(t.name), self._owners(t, "owners"), _json(t.gsis), index_owners, _json(status))
            )
        return b'{"version":%d,"tables":{%s}}' % (self.version, b",".join(routes))

    def _owners(self, table: Table, which: str) -> bytes:
        key = (table.name, which)
        encoded = self._owners_json.get(key)
        if encoded is None:
            encoded = self._owners_json[key] = _json(getattr(table, which))
        return encoded

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
            self._place()
        start = len(t.gsis)
        t.gsis.extend(f"{table}-gsi-{start + i + 1}" for i in range(count))
        self._changed()
        return len(t.gsis)

    def remove_gsis(self, table: str, names: list[str]) -> int:
        """Drop these GSIs of ``table`` (the ones a fault added); returns the table's GSI count."""
        t = self.tables[table]
        kept = [g for g in t.gsis if g not in names]
        if len(kept) != len(t.gsis):
            t.gsis = kept
            self._changed()
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
            self._changed()
        return newly

    def unstick(self, tables: list[str]) -> None:
        if self.stuck & set(tables):
            self.stuck -= set(tables)
            self._changed()

    def size_distribution(self) -> dict[int, int]:
        """Membership entries -> number of nodes with that many (the dimension AWS did not monitor)."""
        return dict(sorted(Counter(self.entries(n) for n in self._held).items()))

    def _changed(self) -> None:
        """A new version: every node's size and payload, and the map, worked out again when asked."""
        self.version += 1
        self._forget()

    def _forget(self) -> None:
        self._sizes.clear()
        self._encoded.clear()
        self._map = None

    def _place(self) -> None:
        """Who holds which partitions of which table (this store's nodes only: another cell serves
        the rest): at start, and when a table's first GSI gives it index partitions."""
        held: dict[str, dict[str, tuple[list[int], list[int]]]] = {n: {} for n in self.nodes}
        for t in self.tables.values():
            for slot, owners in ((0, t.owners), (1, t.index_owners)):
                for p, owner in enumerate(owners):
                    mine = held.get(owner)
                    if mine is not None:
                        mine.setdefault(t.name, ([], []))[slot].append(p)
        self._held = held
        self._owners_json.clear()
        self._forget()


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


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
