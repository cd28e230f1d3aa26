"""The membership store: tables, partitions, GSI partitions and which node holds each.

A node's membership is the list of partitions assigned to it, one entry per partition of a
table or of one of its Global Secondary Indexes. GSI-heavy tables live on ~15% of the fleet
(every rack has its share), so when customers adopt GSIs those nodes' memberships grow
several times larger while everyone else's stay small: the margin erosion of 2015.

Pure data: no I/O. Encoded membership payloads are cached per node and rebuilt only when
the store changes, so answering a renewal costs the real process almost nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from stormcore.fleet import cell_racks, holds_gsi_heavy, node_id, rack_of
from stormcore.settings import LabSettings
from stormcore.wire import Membership, MembershipEntry, PartitionMap, TableRoute

# Ordinary tables, among them the control-plane state of the services that cascaded in 2015,
# with their share of the ordinary nodes' partitions (so of the customer traffic). metric-groups
# is small: when the metadata behind it is stuck (the Monday tail) its customers fail while the
# aggregate error stays in the account's 0.15-0.25% (0.17% of requests with the GSIs, 0.26% before).
TABLE_WEIGHTS = {"orders": 90, "carts": 75, "sessions": 75, "queue-metadata": 30, "metric-groups": 1}
# Large tables whose customers adopted GSIs: queried by alternate keys. The scaling service's
# groups and activities are among them, so the storm reaches Auto Scaling first, as in 2015.
GSI_HEAVY_TABLES = ("catalog", "clickstream", "scaling-groups")
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
    owners: list[str]  # owners[p] holds partition p of the table and of each of its GSIs
    gsis: list[str] = field(default_factory=list)

    @property
    def partitions(self) -> int:
        return len(self.owners)


class MembershipStore:
    def __init__(self, tables: list[Table], nodes: list[str]) -> None:
        self.tables = {t.name: t for t in tables}
        self.nodes = list(nodes)
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
        return cls(list(fleet.tables.values()), [n for n in fleet.nodes if rack_of(n) in racks])

    @classmethod
    def for_fleet(cls, settings: LabSettings) -> MembershipStore:
        nodes: list[str] = []
        big: list[str] = []
        for rack in range(settings.racks):
            for index in range(settings.nodes_per_rack):
                (big if holds_gsi_heavy(rack, index, settings) else nodes).append(node_id(rack, index))
        small = nodes
        tables = _spread(TABLE_WEIGHTS, small, settings.small_entries)
        heavy = _spread(dict.fromkeys(GSI_HEAVY_TABLES, 1), big, settings.big_base_entries)
        if settings.gsi_growth:
            for table in heavy:
                table.gsis = [f"{table.name}-{key}" for key in GSI_KEYS[: settings.big_gsis]]
        everyone = sorted(small + big)
        return cls(tables + heavy, everyone)

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
        """Routing for customers: who holds each partition (GSI partitions sit with their table's)."""
        if self._map is None:
            self._map = PartitionMap(
                self.version,
                {
                    t.name: TableRoute(tuple(t.owners), tuple(t.gsis), "updating" if t.name in self.stuck else "active")
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
            width = HASH_SPACE // max(1, t.partitions)
            for index in [None, *t.gsis]:
                for p, owner in enumerate(t.owners):
                    if owner in entries:  # another cell's node: that cell serves it
                        entries[owner].append(MembershipEntry(t.name, index, p, (p * width, (p + 1) * width - 1)))
        self._entries = entries
        self._encoded.clear()
        self._map = None


def _spread(weights: dict[str, int], nodes: list[str], per_node: int) -> list[Table]:
    """Deal ``per_node`` partitions to every node; the tables take turns in proportion to their
    weights (smooth weighted round robin), so every node holds a mix of them."""
    turns = _interleave(weights)
    owners: dict[str, list[str]] = {name: [] for name in weights}
    for k in range(per_node):
        for n, node in enumerate(nodes):
            owners[turns[(n * per_node + k) % len(turns)]].append(node)
    return [Table(name, owned) for name, owned in owners.items() if owned]


def _interleave(weights: dict[str, int]) -> list[str]:
    total, current, turns = sum(weights.values()), dict.fromkeys(weights, 0), []
    for _ in range(total):
        for name, weight in weights.items():
            current[name] += weight
        chosen = max(current, key=lambda name: current[name])
        current[chosen] -= total
        turns.append(chosen)
    return turns
