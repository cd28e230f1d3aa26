"""The store answers a change by what the change touches, byte for byte what a full rebuild of
every membership and of the partition map gives (the rebuild is kept here as the oracle)."""

from __future__ import annotations

import json

import pytest

from metadata_service.membership import HASH_SPACE, MembershipStore
from stormcore.settings import LabSettings
from stormcore.wire import Membership, MembershipEntry, PartitionMap, TableRoute


def rebuilt(store: MembershipStore) -> dict[str, bytes]:
    """Every node's membership bytes from nothing: every table, every partition, every GSI."""
    entries: dict[str, list[MembershipEntry]] = {n: [] for n in store.nodes}
    for t in store.tables.values():
        if t.name in store.stuck:
            continue
        for index, owners in [(None, t.owners), *((gsi, t.index_owners) for gsi in t.gsis)]:
            width = HASH_SPACE // max(1, len(owners))
            for p, owner in enumerate(owners):
                if owner in entries:
                    entries[owner].append(MembershipEntry(t.name, index, p, (p * width, (p + 1) * width - 1)))
    return {n: Membership(n, store.version, tuple(e)).encode() for n, e in entries.items()}


def rebuilt_map(store: MembershipStore) -> bytes:
    routes = {
        t.name: TableRoute(tuple(t.owners), tuple(t.gsis), "updating" if t.name in store.stuck else "active", tuple(t.index_owners))
        for t in store.tables.values()
    }
    return PartitionMap(store.version, routes).encode()


def same_as_rebuilt(store: MembershipStore) -> None:
    expected = rebuilt(store)
    assert {n: store.membership(n) for n in store.nodes} == expected
    assert {n: store.entries(n) for n in store.nodes} == {n: len(json.loads(b)["entries"]) for n, b in expected.items()}
    assert store.partition_map() == rebuilt_map(store)


@pytest.mark.parametrize(
    "settings",
    [LabSettings(racks=4, nodes_per_rack=50), LabSettings(racks=4, nodes_per_rack=50, gsi_growth=False)],
    ids=["2015", "pre-GSI"],
)
def test_every_change_answers_as_a_full_rebuild(settings):
    store = MembershipStore.for_fleet(settings)
    same_as_rebuilt(store)
    store.add_gsis("catalog", 3)
    same_as_rebuilt(store)
    store.add_gsis("orders", 1)  # a table's first GSI: its index partitions placed
    same_as_rebuilt(store)
    store.stick(["sessions", "catalog"])
    same_as_rebuilt(store)
    store.unstick(["catalog"])
    same_as_rebuilt(store)
    store.remove_gsis("catalog", store.tables["catalog"].gsis[-2:])
    same_as_rebuilt(store)


def test_a_cell_serves_only_its_nodes_and_the_fleets_map():
    s = LabSettings(racks=4, nodes_per_rack=50, cells=2)
    store = MembershipStore.for_cell(s, 1)
    store.add_gsis("clickstream", 2)
    same_as_rebuilt(store)
    assert not store.has_node("r00n000") and store.has_node("r03n000")


def test_routes_pick_as_a_choice_over_every_partition_did():
    """The customers' routes number the partitions without building the list; with the same seed
    they pick the same partitions, in the same order, as a choice over the built list."""
    import random

    from services.loadgen.traffic import Routes

    store = MembershipStore.for_fleet(LabSettings(racks=4, nodes_per_rack=50))
    store.add_gsis("orders", 1)
    routes = Routes(PartitionMap.decode(store.partition_map()))
    listed = []
    for name, t in sorted(store.tables.items()):
        listed += [(name, None, p, o) for p, o in enumerate(t.owners)]
        for gsi in t.gsis:
            listed += [(name, gsi, p, o) for p, o in enumerate(t.index_owners)]
    assert routes.targets == listed and routes.size == len(listed)
    ours, theirs = random.Random(7), random.Random(7)
    for _ in range(2000):
        r = routes.pick(ours)
        table, index, partition, owner = theirs.choice(listed)
        theirs.random() if index is None else None  # the method's draw, as pick makes it
        theirs.randrange(50)
        assert (r.table, r.index, r.partition, r.node) == (table, index, partition, owner)
