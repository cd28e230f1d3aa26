import json

import pytest

from metadata_service.membership import TABLES, MembershipStore, TooManyGsis, UnknownTable
from services.loadgen.traffic import Routes
from stormcore.fleet import rack_of
from stormcore.settings import LabSettings
from stormcore.wire import PartitionMap


@pytest.fixture(scope="module")
def store_2015():
    return MembershipStore.for_fleet(LabSettings())


def test_2015_sizes_and_shares(store_2015):
    sizes = store_2015.size_distribution()
    assert sizes == {20: 850, 138: 150}
    big_entries = 150 * 138
    assert big_entries / (big_entries + 850 * 20) == pytest.approx(0.55, abs=0.01)


def test_every_rack_has_its_share_of_big_nodes(store_2015):
    per_rack = {}
    for node in store_2015.nodes:
        if store_2015.entries(node) == 138:
            per_rack[rack_of(node)] = per_rack.get(rack_of(node), 0) + 1
    assert per_rack == {rack: 15 for rack in range(10)}


def test_pre_gsi_sizes_are_about_twice_small():
    store = MembershipStore.for_fleet(LabSettings(gsi_growth=False))
    assert store.size_distribution() == {20: 850, 46: 150}


def test_membership_payload_is_the_real_list(store_2015):
    node = next(n for n in store_2015.nodes if store_2015.entries(n) == 138)
    body = json.loads(store_2015.membership(node))
    assert body["node"] == node and len(body["entries"]) == 138
    assert {e["table"] for e in body["entries"] if e["index"] is None} == set(TABLES) - {"metric-groups"}  # a mix of tables
    indexed = {t for t, p in TABLES.items() if p.indexed}
    assert {e["index"] for e in body["entries"] if e["index"]} == {f"{t}-by-{k}" for t in indexed for k in ("brand", "price")}
    assert len(store_2015.membership(node)) > 5 * len(store_2015.membership(store_2015.nodes[5]))


@pytest.mark.parametrize("nodes", [200, 400, 1000])
def test_every_table_is_dealt_over_both_classes_in_proportion_to_their_slots(nodes):
    """The placement rule names no table: each one's partitions sit on the large instances in the
    share those hold of the fleet's slots (46 of every 478 per 20 nodes: 28.9%), so which service
    a storm of the large instances reaches, and how far, follows from the rule."""
    s = LabSettings(racks=10, nodes_per_rack=nodes // 10)
    store = MembershipStore.for_fleet(s)
    large = set(store.index_nodes)
    slots = len(large) * s.big_base_entries / (len(large) * s.big_base_entries + (nodes - len(large)) * s.small_entries)
    for name, table in store.tables.items():
        on_large = sum(owner in large for owner in table.owners) / table.partitions
        assert abs(on_large - slots) < (0.06 if table.partitions < 100 else 0.01), (name, on_large, slots)
        if table.gsis:  # the GSIs' partitions are all on the large instances
            assert set(table.index_owners) <= large
    counts = {name: t.partitions for name, t in store.tables.items()}
    weights = {name: TABLES[name].weight for name in counts}
    for name in counts:  # and the tables' sizes follow their weights
        assert counts[name] / sum(counts.values()) == pytest.approx(weights[name] / sum(weights.values()), abs=0.002)


def test_payload_is_cached_until_the_store_changes():
    store = MembershipStore.for_fleet(LabSettings(racks=1, nodes_per_rack=20))
    node = store.nodes[0]
    first = store.membership(node)
    assert store.membership(node) is first
    store.add_gsis("catalog", 1)
    assert store.membership(node) is not first
    assert json.loads(store.membership(node))["version"] == 2


def test_gsi_growth_grows_only_the_holders_of_that_table():
    store = MembershipStore.for_fleet(LabSettings(racks=1, nodes_per_rack=20, gsi_growth=False))
    before = {n: store.entries(n) for n in store.nodes}
    store.add_gsis("catalog", 2)
    grown = {n for n in store.nodes if store.entries(n) > before[n]}
    assert grown and all(before[n] > 20 for n in grown)  # the large instances
    assert grown == set(store.tables["catalog"].index_owners)


def test_a_first_gsi_on_an_unindexed_table_goes_to_the_large_instances_as_large_as_its_table():
    store = MembershipStore.for_fleet(LabSettings(racks=2, nodes_per_rack=20))
    before = {n: store.entries(n) for n in store.nodes}
    orders = store.tables["orders"]
    assert not orders.index_owners
    store.add_gsis("orders", 1)
    assert len(orders.index_owners) == orders.partitions and set(orders.index_owners) == set(store.index_nodes)
    added = {n: store.entries(n) - before[n] for n in store.nodes}
    assert sum(added.values()) == orders.partitions and all(added[n] == 0 for n in store.nodes if n not in store.index_nodes)
    route = PartitionMap.decode(store.partition_map()).tables["orders"]
    assert route.gsis == ("orders-gsi-1",) and route.gsi_owners() == tuple(orders.index_owners)


def test_gsi_growth_rejects_unknown_tables_and_too_many():
    store = MembershipStore.for_fleet(LabSettings(racks=1, nodes_per_rack=20))
    with pytest.raises(UnknownTable):
        store.add_gsis("nope", 1)
    with pytest.raises(TooManyGsis):
        store.add_gsis("catalog", 100)
    assert store.version == 1


def test_partition_map_routes_every_partition(store_2015):
    body = json.loads(store_2015.partition_map())
    owners = [o for t in body["tables"].values() for o in t["owners"]]
    assert set(owners) == set(store_2015.nodes)
    index_owners = {o for t in body["tables"].values() for o in t["index_owners"]}
    assert index_owners == set(store_2015.index_nodes)


def test_every_customer_target_is_a_partition_its_node_holds(store_2015):
    """Routes (the customers') and memberships (the nodes') agree on who holds each GSI partition."""
    held = {(n, e["table"], e["index"], e["partition"]) for n in store_2015.nodes for e in json.loads(store_2015.membership(n))["entries"]}
    targets = Routes(PartitionMap.decode(store_2015.partition_map())).targets
    assert len(targets) == len(held) and all((node, table, index, p) in held for table, index, p, node in targets)


@pytest.mark.parametrize("gsi_growth", [True, False])
def test_metric_groups_customers_are_the_account_s_share_of_the_requests(gsi_growth):
    """Monday in 2015: the aggregate error was 0.15-0.25% while one table's customers failed.
    Requests are uniform over partitions (GSI partitions included), so that is the table's share."""
    store = MembershipStore.for_fleet(LabSettings(gsi_growth=gsi_growth))
    targets = Routes(PartitionMap.decode(store.partition_map())).targets
    share = sum(1 for table, *_ in targets if table == "metric-groups") / len(targets)
    assert 0.0015 <= share <= 0.0027


def test_metric_groups_is_a_small_share_and_sticking_it_spares_everyone_else(store_2015):
    total = sum(store_2015.entries(n) for n in store_2015.nodes)
    share = (
        sum(1 for n in store_2015.nodes for e in json.loads(store_2015.membership(n))["entries"] if e["table"] == "metric-groups") / total
    )
    assert 0.001 < share < 0.005  # the Monday tail: the aggregate stays ~0.2% while this table fails
    sizes = store_2015.size_distribution()
    store_2015.stick(["metric-groups"])
    assert sum(store_2015.entries(n) for n in store_2015.nodes) == round(total * (1 - share))
    assert b'"status":"updating"' in store_2015.partition_map()
    store_2015.unstick(["metric-groups"])
    assert store_2015.size_distribution() == sizes
